//===- LowerToRuntime.cpp - htp functions to kernel-calling entry points --===//
//
// This file implements the htp-lower-to-runtime pass, which turns each
// func.func written in htp ops into an LLVM-dialect function with the entry
// ABI of tools/htp-run/entry.h, calling the CPU kernels of
// kernels/htp_kernels.h.
//
// Why not one-shot-bufferize: htp functions are straight-line SSA over static
// shapes, so buffer assignment is an interval-packing problem this pass solves
// exactly, and the result is a plain C ABI (raw pointers, one workspace the
// caller allocates once) instead of memref descriptors and per-call mallocs.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialect/HTPOps.h"
#include "kernels/htp_kernels.h"
#include "runtime/htp.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

namespace mlir::htp {
#define GEN_PASS_DEF_HTPLOWERTORUNTIME
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

constexpr int64_t kAlignment = 64;

int64_t alignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

/// Product of all dims but the last: the rows an op applies its last-dim
/// transform to.
int64_t leadingRows(RankedTensorType type) {
  return type.getNumElements() / std::max<int64_t>(type.getShape().back(), 1);
}

int64_t byteSize(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getNumElements() * static_cast<int64_t>(sizeof(float));
}

/// Where a tensor value lives: one of the caller's buffers, or a workspace slot.
struct Placement {
  enum Kind { Buffer, Workspace } kind;
  int64_t index; ///< buffer index, or byte offset into the workspace
};

/// First-fit allocation of byte ranges in the workspace over live intervals.
class WorkspaceAllocator {
public:
  int64_t allocate(int64_t bytes) {
    bytes = alignUp(bytes);
    int64_t offset = 0;
    for (auto [begin, end] : live) { // `live` is kept sorted by begin
      if (offset + bytes <= begin)
        break;
      offset = std::max(offset, end);
    }
    live.insert(std::upper_bound(live.begin(), live.end(), std::make_pair(offset, offset)),
                {offset, offset + bytes});
    highWater = std::max(highWater, offset + bytes);
    return offset;
  }
  void release(int64_t offset) {
    auto it = llvm::find_if(live, [&](auto &range) { return range.first == offset; });
    assert(it != live.end() && "releasing a slot that is not live");
    live.erase(it);
  }
  int64_t size() const { return std::max<int64_t>(highWater, kAlignment); }

private:
  SmallVector<std::pair<int64_t, int64_t>> live;
  int64_t highWater = 0;
};

/// What the signature's "balance" record says: the shape of the work units
/// of the pairs the balance hooks marked (all layers alike, checked there).
struct BalanceSummary {
  int64_t layers = 0, modelDim = 0, heads = 0, headDim = 0, headFlops = 0;
  int64_t mlpUnits = 0, mlpUnitWidth = 0, mlpUnitFlops = 0;

  void noteAttention(AttentionOp attention, int64_t flopsPerHead) {
    ++layers;
    modelDim = cast<RankedTensorType>(attention.getInput().getType()).getShape().back();
    heads = attention.getNumHeads();
    headDim = attention.getHeadDim();
    headFlops = flopsPerHead;
  }
  void noteMLP(MLPOp mlp, int64_t units, int64_t flopsPerUnit) {
    mlpUnits = units;
    mlpUnitWidth = mlp.getUnitWidth();
    mlpUnitFlops = flopsPerUnit;
  }
};

/// Lowers one htp function; owns the builder state for it.
class EntryLowering {
public:
  EntryLowering(func::FuncOp func, ModuleOp module)
      : func(func), module(module), builder(module.getContext()),
        ptrType(LLVM::LLVMPointerType::get(module.getContext())),
        i64Type(builder.getI64Type()), i32Type(builder.getI32Type()) {}

  LogicalResult run();

private:
  LogicalResult checkSupported();
  void planBuffers();
  Value bufferPointer(int64_t index);
  Value pointerOf(Value tensor);
  Value optionalPointerOf(Value tensor);
  Value constantI64(int64_t value);
  Value constantI32(int64_t value);
  LLVM::LLVMFuncOp declareFunction(StringRef name, Type result, ArrayRef<Value> args);
  void callKernel(StringRef name, ArrayRef<Value> args);
  Value callRuntime(StringRef name, ArrayRef<Value> args);
  void returnIfFailed(Value status);
  LogicalResult lowerOp(Operation *op);
  std::string signatureText();

  func::FuncOp func;
  ModuleOp module;
  OpBuilder builder;
  Type ptrType, i64Type, i32Type;

  unsigned numArgs = 0, numResults = 0;
  llvm::DenseMap<Value, Placement> placement;
  llvm::DenseMap<Operation *, int64_t> scratchOffset; ///< per-op kernel scratch
  int64_t workspaceBytes = 0;
  int64_t gemmFlops = 0;
  BalanceSummary balance;

  LLVM::LLVMFuncOp entry;
  Value rtContext, buffersArg;
  Block *failureBlock = nullptr; ///< returns its i32 argument
  SmallVector<Value> loadedBuffers; ///< buffers[i], loaded once on entry
  Value workspacePtr;
};

LogicalResult EntryLowering::checkSupported() {
  auto isHTPTensor = [](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.hasStaticShape() && tensor.getElementType().isF32();
  };
  for (auto [index, type] : llvm::enumerate(func.getArgumentTypes()))
    if (!isHTPTensor(type))
      return func.emitError() << "argument #" << index << " has type " << type
                              << "; htp entry points take static f32 tensors only";
  for (auto [index, type] : llvm::enumerate(func.getResultTypes()))
    if (!isHTPTensor(type))
      return func.emitError() << "result #" << index << " has type " << type
                              << "; htp entry points return static f32 tensors only";
  if (func.getNumResults() == 0)
    return func.emitError("an htp entry point must return at least one tensor");
  if (!func.getBody().hasOneBlock())
    return func.emitError("htp entry points must be a single block (no control flow)");
  for (Operation &op : func.getBody().front()) {
    if (isa<func::ReturnOp>(op) || op.getDialect() == op.getContext()->getLoadedDialect<HTPDialect>())
      continue;
    return op.emitOpError("is not supported by --htp-lower-to-runtime (only htp ops and "
                          "func.return may appear in an htp entry point)");
  }
  // BLAS takes its dims and leading dims as int: a larger GEMM dim would wrap.
  constexpr int64_t kMaxGemmDim = std::numeric_limits<int32_t>::max();
  for (Operation &op : func.getBody().front().without_terminator())
    for (Value value : llvm::concat<Value>(op.getOperands(), op.getResults())) {
      auto type = cast<RankedTensorType>(value.getType());
      if (type.getRank() == 0)
        continue;
      int64_t rows = type.getNumElements() / std::max<int64_t>(type.getShape().back(), 1);
      if (rows > kMaxGemmDim || type.getShape().back() > kMaxGemmDim)
        return op.emitOpError() << "operand or result of type " << type
                                << " has a matrix dim above 2^31-1, which the CPU kernels "
                                   "(BLAS int dims) cannot take";
    }
  return success();
}

/// Floats of kernel scratch `op` needs in the workspace while it runs (0:
/// none). One place for the formulas: the kernels' and the hooks' headers.
static int64_t scratchFloats(Operation *op) {
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    auto input = cast<RankedTensorType>(attention.getInput().getType());
    int64_t batch = input.getDimSize(0), tokens = input.getDimSize(1);
    if (attention.getPair())
      return htp_rt_attention_scratch_floats(batch, tokens, attention.getNumHeads(),
                                             attention.getHeadDim());
    return htp_cpu_attention_scratch_floats(batch, tokens, input.getDimSize(2),
                                            attention.getNumHeads(), attention.getHeadDim());
  }
  if (auto mlp = dyn_cast<MLPOp>(op)) {
    auto hidden = cast<RankedTensorType>(mlp.getFc1Weight().getType()).getDimSize(0);
    return htp_rt_mlp_scratch_floats(leadingRows(mlp.getType()), hidden, mlp.getUnitWidth());
  }
  return 0;
}

void EntryLowering::planBuffers() {
  Block &body = func.getBody().front();
  numArgs = func.getNumArguments();
  numResults = func.getNumResults();
  for (BlockArgument arg : body.getArguments())
    placement[arg] = {Placement::Buffer, arg.getArgNumber()};

  // A returned value computed by an op is written straight into its result
  // buffer (the first time it is returned; repeats are copied at the end).
  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands()))
    if (value.getDefiningOp() && !placement.count(value))
      placement[value] = {Placement::Buffer, static_cast<int64_t>(numArgs + index)};

  // The last op that reads each workspace value, so its slot can be reused.
  llvm::DenseMap<Value, Operation *> lastUse;
  for (Operation &op : body.without_terminator())
    for (Value operand : op.getOperands())
      lastUse[operand] = &op;

  WorkspaceAllocator allocator;
  for (Operation &op : body.without_terminator()) {
    for (Value result : op.getResults())
      if (!placement.count(result))
        placement[result] = {Placement::Workspace, allocator.allocate(byteSize(result))};
    if (int64_t floats = scratchFloats(&op)) {
      int64_t offset = allocator.allocate(floats * static_cast<int64_t>(sizeof(float)));
      scratchOffset[&op] = offset;
      allocator.release(offset);
    }
    // Operands are released only after the result is placed: kernels do not
    // accept outputs aliasing their inputs.
    llvm::SetVector<Value> operands(op.operand_begin(), op.operand_end());
    for (Value operand : operands) {
      Placement where = placement.lookup(operand);
      if (lastUse.lookup(operand) == &op && where.kind == Placement::Workspace)
        allocator.release(where.index);
    }
    // A value produced but never read (dead code survived) frees at once.
    for (Value result : op.getResults())
      if (result.use_empty() && placement[result].kind == Placement::Workspace)
        allocator.release(placement[result].index);
  }
  workspaceBytes = allocator.size();
}

Value EntryLowering::constantI64(int64_t value) {
  return LLVM::ConstantOp::create(builder, func.getLoc(), i64Type, value);
}

Value EntryLowering::constantI32(int64_t value) {
  return LLVM::ConstantOp::create(builder, func.getLoc(), i32Type, value);
}

Value EntryLowering::bufferPointer(int64_t index) { return loadedBuffers[index]; }

Value EntryLowering::pointerOf(Value tensor) {
  Placement where = placement.lookup(tensor);
  if (where.kind == Placement::Buffer)
    return bufferPointer(where.index);
  return LLVM::GEPOp::create(builder, func.getLoc(), ptrType, builder.getI8Type(), workspacePtr,
                             ArrayRef<LLVM::GEPArg>{constantI64(where.index)});
}

/// A null pointer for an absent optional operand (a missing bias).
Value EntryLowering::optionalPointerOf(Value tensor) {
  if (tensor)
    return pointerOf(tensor);
  return LLVM::ZeroOp::create(builder, func.getLoc(), ptrType).getResult();
}

LLVM::LLVMFuncOp EntryLowering::declareFunction(StringRef name, Type result,
                                                ArrayRef<Value> args) {
  auto function = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
  if (!function) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    auto type = LLVM::LLVMFunctionType::get(result, llvm::to_vector(ValueRange(args).getTypes()));
    function = LLVM::LLVMFuncOp::create(builder, module.getLoc(), name, type);
  }
  return function;
}

void EntryLowering::callKernel(StringRef name, ArrayRef<Value> args) {
  auto kernel = declareFunction(name, LLVM::LLVMVoidType::get(module.getContext()), args);
  LLVM::CallOp::create(builder, func.getLoc(), kernel, args);
}

/// Calls a libhtprt function that returns an htp_result (i32).
Value EntryLowering::callRuntime(StringRef name, ArrayRef<Value> args) {
  auto function = declareFunction(name, i32Type, args);
  return LLVM::CallOp::create(builder, func.getLoc(), function, args).getResult();
}

/// Branches to the shared failure exit when `status` is not HTP_OK, and
/// continues in a new block otherwise.
void EntryLowering::returnIfFailed(Value status) {
  Location loc = func.getLoc();
  Region &body = entry.getBody();
  if (!failureBlock) {
    OpBuilder::InsertionGuard guard(builder);
    failureBlock = builder.createBlock(&body, body.end(), {i32Type}, {loc});
    LLVM::ReturnOp::create(builder, loc, ValueRange{failureBlock->getArgument(0)});
  }
  Value failed = LLVM::ICmpOp::create(builder, loc, LLVM::ICmpPredicate::ne, status,
                                      LLVM::ConstantOp::create(builder, loc, i32Type, 0));
  Block *next = new Block();
  body.getBlocks().insert(Region::iterator(failureBlock), next);
  LLVM::CondBrOp::create(builder, loc, failed, failureBlock, ValueRange{status}, next,
                         ValueRange{});
  builder.setInsertionPointToEnd(next);
}


LogicalResult EntryLowering::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](LinearOp linear) {
        auto input = cast<RankedTensorType>(linear.getInput().getType());
        auto weight = cast<RankedTensorType>(linear.getWeight().getType());
        int64_t rows = leadingRows(input), in = weight.getDimSize(1), out = weight.getDimSize(0);
        callKernel("htp_cpu_linear_f32",
                   {pointerOf(linear.getInput()), pointerOf(linear.getWeight()),
                    optionalPointerOf(linear.getBias()),
                    pointerOf(linear.getResult()), constantI64(rows), constantI64(in),
                    constantI64(out)});
        gemmFlops += 2 * rows * in * out;
        return success();
      })
      .Case([&](AttentionOp attention) {
        auto input = cast<RankedTensorType>(attention.getInput().getType());
        int64_t batch = input.getDimSize(0), tokens = input.getDimSize(1),
                dim = input.getDimSize(2), heads = attention.getNumHeads(),
                headDim = attention.getHeadDim(), inner = heads * headDim;
        Value scratch =
            LLVM::GEPOp::create(builder, loc, ptrType, builder.getI8Type(), workspacePtr,
                                ArrayRef<LLVM::GEPArg>{constantI64(scratchOffset.lookup(op))});
        if (std::optional<uint64_t> pair = attention.getPair()) {
          // The balance hook: the heads the plan gives this rank (runtime/htp.h).
          Value status = callRuntime(
              "htp_rt_attention_f32",
              {rtContext, constantI32(*pair), pointerOf(attention.getInput()),
               pointerOf(attention.getQkvWeight()), pointerOf(attention.getQkvBias()),
               pointerOf(attention.getProjWeight()), pointerOf(attention.getResult()), scratch,
               constantI64(batch), constantI64(tokens), constantI64(dim), constantI64(heads),
               constantI64(headDim)});
          returnIfFailed(status);
          balance.noteAttention(attention, 2 * batch * tokens * (3 * dim * headDim + headDim * dim) +
                                               4 * batch * tokens * tokens * headDim);
        } else {
          callKernel("htp_cpu_attention_f32",
                     {pointerOf(attention.getInput()), pointerOf(attention.getQkvWeight()),
                      pointerOf(attention.getQkvBias()), pointerOf(attention.getProjWeight()),
                      optionalPointerOf(attention.getProjBias()),
                      pointerOf(attention.getResult()), scratch, constantI64(batch),
                      constantI64(tokens), constantI64(dim), constantI64(heads),
                      constantI64(headDim)});
        }
        int64_t rows = batch * tokens;
        gemmFlops += 2 * rows * dim * 3 * inner;                    // qkv
        gemmFlops += 2 * 2 * batch * heads * tokens * tokens * headDim; // q·kᵀ and p·v
        gemmFlops += 2 * rows * inner * dim;                        // proj
        return success();
      })
      .Case([&](LayerNormOp norm) {
        auto input = cast<RankedTensorType>(norm.getInput().getType());
        Value epsilon = LLVM::ConstantOp::create(builder, loc, builder.getF32Type(),
                                                 norm.getEpsilonAttr());
        callKernel("htp_cpu_layer_norm_f32",
                   {pointerOf(norm.getInput()), pointerOf(norm.getWeight()),
                    pointerOf(norm.getBias()), pointerOf(norm.getResult()),
                    constantI64(leadingRows(input)), constantI64(input.getShape().back()),
                    epsilon});
        return success();
      })
      .Case([&](GeluOp gelu) {
        Value tanhApprox = LLVM::ConstantOp::create(builder, loc, i32Type,
                                                    gelu.getApproximate() == Approximation::Tanh ? 1 : 0);
        callKernel("htp_cpu_gelu_f32",
                   {pointerOf(gelu.getInput()), pointerOf(gelu.getResult()),
                    constantI64(gelu.getType().getNumElements()), tanhApprox});
        return success();
      })
      .Case([&](AddOp add) {
        callKernel("htp_cpu_add_f32",
                   {pointerOf(add.getLhs()), pointerOf(add.getRhs()), pointerOf(add.getResult()),
                    constantI64(add.getType().getNumElements())});
        return success();
      })
      .Case([&](MLPOp mlp) {
        int64_t rows = leadingRows(mlp.getType()), dim = mlp.getType().getShape().back();
        int64_t hidden = cast<RankedTensorType>(mlp.getFc1Weight().getType()).getDimSize(0);
        int64_t width = mlp.getUnitWidth();
        Value scratch =
            LLVM::GEPOp::create(builder, loc, ptrType, builder.getI8Type(), workspacePtr,
                                ArrayRef<LLVM::GEPArg>{constantI64(scratchOffset.lookup(op))});
        Value status = callRuntime(
            "htp_rt_mlp_f32",
            {rtContext, constantI32(mlp.getPair()), pointerOf(mlp.getInput()),
             pointerOf(mlp.getFc1Weight()), optionalPointerOf(mlp.getFc1Bias()),
             pointerOf(mlp.getFc2Weight()), pointerOf(mlp.getResult()), scratch,
             constantI64(rows), constantI64(dim), constantI64(hidden), constantI64(width),
             constantI32(mlp.getApproximate() == Approximation::Tanh ? 1 : 0)});
        returnIfFailed(status);
        gemmFlops += 2 * 2 * rows * dim * hidden;
        balance.noteMLP(mlp, hidden / width, 2 * 2 * rows * dim * width);
        return success();
      })
      .Case([&](BiasAddOp biasAdd) {
        auto input = cast<RankedTensorType>(biasAdd.getInput().getType());
        callKernel("htp_cpu_bias_add_f32",
                   {pointerOf(biasAdd.getInput()), pointerOf(biasAdd.getBias()),
                    pointerOf(biasAdd.getResult()), constantI64(leadingRows(input)),
                    constantI64(input.getShape().back())});
        return success();
      })
      .Case([&](AllReduceOp reduce) {
        // htp_result htp_allreduce_sum_f32(htp_ctx *, const float *, float *, size_t):
        // a failure (a peer hung or died) is returned from the entry at once.
        Value status = callRuntime(
            "htp_allreduce_sum_f32",
            {rtContext, pointerOf(reduce.getInput()), pointerOf(reduce.getResult()),
             constantI64(reduce.getType().getNumElements())});
        returnIfFailed(status);
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitOpError("has no lowering in --htp-lower-to-runtime");
      });
}

/// Writes a shape as "RANK D0 D1 ...", the signature's dims field.
static void appendDims(llvm::raw_ostream &os, Type type) {
  auto tensor = cast<RankedTensorType>(type);
  os << "f32 " << tensor.getRank();
  for (int64_t dim : tensor.getShape())
    os << ' ' << dim;
}

std::string EntryLowering::signatureText() {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "htp-entry 1\nentry " << func.getSymName() << '\n';
  for (unsigned index = 0; index < numArgs; ++index) {
    auto param = func.getArgAttrOfType<StringAttr>(index, kParamAttrName);
    auto input = func.getArgAttrOfType<StringAttr>(index, kInputAttrName);
    os << "arg " << index << (param ? " param " : " input ");
    if (param)
      os << param.getValue();
    else if (input)
      os << input.getValue();
    else
      os << "arg" << index;
    os << ' ';
    appendDims(os, func.getArgumentTypes()[index]);
    os << '\n';
  }
  for (unsigned index = 0; index < numResults; ++index) {
    os << "result " << index << " result" << index << ' ';
    appendDims(os, func.getResultTypes()[index]);
    os << '\n';
  }
  os << "workspace " << workspaceBytes << "\nflops " << gemmFlops << '\n';
  if (auto tp = func->getAttrOfType<IntegerAttr>(kTPAttrName))
    os << "tp " << tp.getInt() << '\n';
  if (balance.layers)
    os << "balance " << balance.layers << ' ' << balance.modelDim << ' ' << balance.heads << ' '
       << balance.headDim << ' ' << balance.headFlops << ' ' << balance.mlpUnits << ' '
       << balance.mlpUnitWidth << ' ' << balance.mlpUnitFlops << '\n';
  for (unsigned index = 0; index < numArgs; ++index)
    if (auto shard = func.getArgAttrOfType<ShardAttr>(index, kShardAttrName))
      os << "shard " << index << ' ' << shard.getDim() << ' ' << shard.getParts() << ' '
         << stringifyShardLayout(shard.getLayout()) << '\n';
  os << "end\n";
  return text;
}

/// Defines a NUL-terminated, externally visible constant string `name`.
static void defineStringGlobal(OpBuilder &builder, ModuleOp module, StringRef name,
                               StringRef value) {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  std::string bytes = value.str();
  bytes.push_back('\0');
  auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), bytes.size());
  LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, name, builder.getStringAttr(bytes));
}

LogicalResult EntryLowering::run() {
  if (failed(checkSupported()))
    return failure();
  planBuffers();

  // i32 @F(ptr %rt_ctx, ptr %buffers)
  builder.setInsertionPoint(func);
  auto entryType = LLVM::LLVMFunctionType::get(i32Type, {ptrType, ptrType});
  std::string name = func.getSymName().str();
  entry = LLVM::LLVMFuncOp::create(builder, func.getLoc(), name + ".htp_lowering", entryType);
  Block *block = entry.addEntryBlock(builder);
  rtContext = block->getArgument(0);
  buffersArg = block->getArgument(1);
  builder.setInsertionPointToEnd(block);
  for (int32_t index = 0, end = numArgs + numResults + 1; index < end; ++index) {
    Value slot = LLVM::GEPOp::create(builder, func.getLoc(), ptrType, ptrType, buffersArg,
                                     ArrayRef<LLVM::GEPArg>{index});
    loadedBuffers.push_back(
        LLVM::LoadOp::create(builder, func.getLoc(), ptrType, slot, /*alignment=*/8));
  }
  workspacePtr = loadedBuffers.back();

  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator())
    if (failed(lowerOp(&op)))
      return failure();

  // Results not computed in place (a returned argument, a value returned
  // twice) are copied into their buffers.
  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
    int64_t resultBuffer = numArgs + index;
    Placement where = placement.lookup(value);
    if (where.kind == Placement::Buffer && where.index == resultBuffer)
      continue;
    LLVM::MemcpyOp::create(builder, func.getLoc(), bufferPointer(resultBuffer), pointerOf(value),
                           constantI64(byteSize(value)), /*isVolatile=*/false);
  }
  LLVM::ReturnOp::create(builder, func.getLoc(),
                         ValueRange{LLVM::ConstantOp::create(builder, func.getLoc(), i32Type, 0)});

  defineStringGlobal(builder, module, name + "__htp_sig", signatureText());
  func.erase();
  entry.setSymName(name);
  return success();
}

struct LowerToRuntimePass : htp::impl::HTPLowerToRuntimeBase<LowerToRuntimePass> {
  using HTPLowerToRuntimeBase::HTPLowerToRuntimeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> entries;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      if (func.isDeclaration()) {
        func.emitError("external functions are not supported in htp modules");
        return signalPassFailure();
      }
      entries.push_back(func);
    }
    SmallVector<std::string> publicNames;
    for (func::FuncOp func : entries) {
      if (func.isPublic())
        publicNames.push_back(func.getSymName().str());
      if (failed(EntryLowering(func, module).run()))
        return signalPassFailure();
    }
    if (publicNames.size() == 1) {
      OpBuilder builder(module.getContext());
      defineStringGlobal(builder, module, "htp_default_entry", publicNames.front());
    }
  }
};

} // namespace
