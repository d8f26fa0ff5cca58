//===- LowerToRuntime.cpp - htp functions to kernel-calling entry points --===//
//
// This file implements the htp-lower-to-runtime pass, which turns each
// func.func written in htp ops into an LLVM-dialect function with the entry
// ABI of runtime/htp_entry.h, calling the CPU kernels of
// kernels/htp_kernels.h, and writes each function's JSON signature. Where
// each value lives was decided by htp-assign-workspace (AssignWorkspace.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/EntryFunction.h"
#include "passes/Passes.h"

#include "dialect/HTPOps.h"
#include "runtime/htp_entry.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/JSON.h"

#include <limits>

namespace mlir::htp {
#define GEN_PASS_DEF_HTPLOWERTORUNTIME
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// Why `name` cannot name an argument or an entry point (empty when it can):
/// runtime/htp_entry.h's rules for names. Anything else, spaces and quotes
/// included, is safe: the signature is JSON and the symbols are prefixed.
std::string nameProblem(StringRef name) {
  if (name.empty())
    return "is empty";
  if (name.size() > HTP_ENTRY_MAX_NAME)
    return "is longer than " + std::to_string(HTP_ENTRY_MAX_NAME) + " bytes";
  if (!llvm::json::isUTF8(name))
    return "is not valid UTF-8";
  for (unsigned char byte : name.bytes())
    if (byte < 0x20 || byte == 0x7f)
      return "contains a control character";
  return "";
}

/// `name` quoted and escaped for a diagnostic, cut short if long.
std::string quotedName(StringRef name) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << '\'';
  llvm::printEscapedString(name.take_front(64), os);
  os << (name.size() > 64 ? "...'" : "'");
  return text;
}

/// 1 when a GELU (or an MLP's GELU) uses the tanh approximation: the
/// kernels' int flag.
template <typename OpTy>
int64_t tanhFlag(OpTy op) {
  return op.getApproximate() == Approximation::Tanh ? 1 : 0;
}

/// The slice of a global tensor an argument holds, from its htp.shard
/// attribute (written by --htp-tensor-parallel).
struct ShardRecord {
  int64_t dim, parts;
  std::string layout;
};

/// Argument `index`'s shard record: none when it is not sharded, failure
/// (with a diagnostic) when the attribute is malformed.
FailureOr<std::optional<ShardRecord>> readShard(func::FuncOp func, unsigned index) {
  // The dialect verified the attribute against the argument (HTPDialect.cpp).
  auto shard = func.getArgAttrOfType<ShardAttr>(index, kShardAttrName);
  if (!shard)
    return std::optional<ShardRecord>();
  return std::optional<ShardRecord>(ShardRecord{
      shard.getDim(), shard.getParts(), stringifyShardLayout(shard.getLayout()).str()});
}

/// Where a tensor value lives: one of the caller's buffers, or a workspace slot.
struct Placement {
  enum Kind { Buffer, Workspace } kind;
  int64_t index; ///< buffer index, or byte offset into the workspace
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
  /// `name` is the function's own name: the pass renamed `func` out of the
  /// way of the symbols it creates.
  EntryLowering(func::FuncOp func, StringRef name, ModuleOp module)
      : func(func), name(name.str()), module(module), builder(module.getContext()),
        ptrType(LLVM::LLVMPointerType::get(module.getContext())),
        i64Type(builder.getI64Type()), i32Type(builder.getI32Type()) {}

  LogicalResult run();

private:
  LogicalResult checkSupported();
  LogicalResult readPlacement();
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
  LogicalResult addFlops(Operation *op, CheckedInt flops);
  std::string argumentName(unsigned index);
  std::string signatureJSON();

  func::FuncOp func;
  std::string name;
  ModuleOp module;
  OpBuilder builder;
  Type ptrType, i64Type, i32Type;

  unsigned numArgs = 0, numResults = 0;
  llvm::DenseMap<Value, Placement> placement;
  llvm::DenseMap<Operation *, int64_t> scratchOffset; ///< per-op kernel scratch
  int64_t workspaceBytes = 0;
  int64_t gemmFlops = 0; ///< matrix-product FLOPs per call

  BalanceSummary balance;

  LLVM::LLVMFuncOp entry;
  Value rtContext, buffersArg;
  Block *failureBlock = nullptr; ///< returns its i32 argument
  SmallVector<Value> loadedBuffers; ///< buffers[i], loaded once on entry
  Value workspacePtr;
};

LogicalResult EntryLowering::checkSupported() {
  if (failed(checkEntryFunction(func)))
    return failure();
  if (func.getNumResults() == 0)
    return func.emitError("an htp entry point must return at least one tensor");
  // What runtime/htp_entry.h's reader refuses is refused here first.
  if (func.getNumArguments() > HTP_ENTRY_MAX_TENSORS ||
      func.getNumResults() > HTP_ENTRY_MAX_TENSORS)
    return func.emitError() << "an htp entry point takes at most "
                            << static_cast<int64_t>(HTP_ENTRY_MAX_TENSORS)
                            << " arguments and returns at most as many results";
  auto checkShape = [&](StringRef what, unsigned index, Type type) -> LogicalResult {
    auto tensor = cast<RankedTensorType>(type);
    if (tensor.getRank() > HTP_ENTRY_MAX_RANK)
      return func.emitError() << what << " #" << index << " has rank " << tensor.getRank()
                              << "; htp entry points take at most "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_RANK) << " dims";
    for (int64_t dim : tensor.getShape())
      if (dim < 1 || dim > HTP_ENTRY_MAX_DIM)
        return func.emitError() << what << " #" << index << " has type " << type
                                << "; every dim of an htp entry point must be in [1, 2^31-1]";
    return success();
  };
  for (auto [index, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (failed(checkShape("argument", index, type)))
      return failure();
    std::string problem = nameProblem(argumentName(index));
    if (!problem.empty())
      return func.emitError() << "argument #" << index << " is named "
                              << quotedName(argumentName(index)) << ", which " << problem
                              << " (a name must be 1 to "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_NAME)
                              << " bytes of UTF-8 without control characters)";
    if (failed(readShard(func, index)))
      return failure();
  }
  for (auto [index, type] : llvm::enumerate(func.getResultTypes()))
    if (failed(checkShape("result", index, type)))
      return failure();
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

/// Reads where each value lives (AssignWorkspace.cpp's attributes), checking
/// that every slot lies within the workspace: the kernels write there.
LogicalResult EntryLowering::readPlacement() {
  Block &body = func.getBody().front();
  numArgs = func.getNumArguments();
  numResults = func.getNumResults();
  auto bytes = func->getAttrOfType<IntegerAttr>(kWorkspaceBytesAttrName);
  if (!bytes)
    return func.emitError() << "has no '" << kWorkspaceBytesAttrName
                            << "' (no workspace placement): run --htp-assign-workspace first";
  workspaceBytes = bytes.getInt(); // the dialect checked it is aligned and within the limit
  auto checkInWorkspace = [&](Operation &op, StringRef what, int64_t offset,
                              std::optional<int64_t> size) -> LogicalResult {
    std::optional<int64_t> end = size ? (CheckedInt(offset) + *size).get() : std::nullopt;
    if (!end || *end > workspaceBytes)
      return op.emitOpError() << "its " << what << " at byte " << offset
                              << " does not fit in the workspace of " << workspaceBytes
                              << " bytes ('" << kWorkspaceBytesAttrName << "')";
    return success();
  };

  for (BlockArgument arg : body.getArguments())
    placement[arg] = {Placement::Buffer, arg.getArgNumber()};
  // An op result without a slot is computed in place in the result buffer
  // it is first returned in.
  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseMap<Value, int64_t> firstResultBuffer;
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands()))
    firstResultBuffer.try_emplace(value, numArgs + index);
  for (Operation &op : body.without_terminator()) {
    Value result = op.getResult(0); // htp ops have one result (checkEntryFunction)
    if (auto offset = op.getAttrOfType<IntegerAttr>(kWorkspaceOffsetAttrName)) {
      if (failed(checkInWorkspace(op, "result", offset.getInt(), byteSize(result))))
        return failure();
      placement[result] = {Placement::Workspace, offset.getInt()};
    } else if (firstResultBuffer.count(result)) {
      placement[result] = {Placement::Buffer, firstResultBuffer.lookup(result)};
    } else {
      return op.emitOpError() << "has no '" << kWorkspaceOffsetAttrName
                              << "' and its result is not returned: run "
                                 "--htp-assign-workspace first";
    }
    std::optional<int64_t> scratch = scratchBytes(&op);
    if (!scratch)
      return op.emitOpError("needs more kernel scratch than int64 counts");
    if (!*scratch)
      continue;
    auto offset = op.getAttrOfType<IntegerAttr>(kScratchOffsetAttrName);
    if (!offset)
      return op.emitOpError() << "needs kernel scratch but has no '" << kScratchOffsetAttrName
                              << "': run --htp-assign-workspace first";
    if (failed(checkInWorkspace(op, "kernel scratch", offset.getInt(), *scratch)))
      return failure();
    scratchOffset[&op] = offset.getInt();
  }
  return success();
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


/// Adds `op`'s matrix-product FLOPs to the block's, failing on overflow.
LogicalResult EntryLowering::addFlops(Operation *op, CheckedInt flops) {
  std::optional<int64_t> total = (flops + gemmFlops).get();
  if (!total)
    return op->emitOpError("the block's FLOP count overflows int64");
  gemmFlops = *total;
  return success();
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
        return addFlops(op, CheckedInt(2) * rows * in * out);
      })
      .Case([&](AttentionOp attention) -> LogicalResult {
        auto input = cast<RankedTensorType>(attention.getInput().getType());
        int64_t batch = input.getDimSize(0), tokens = input.getDimSize(1),
                dim = input.getDimSize(2), heads = attention.getNumHeads(),
                headDim = attention.getHeadDim();
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
          // One head's share: its q, k, v rows and proj columns, its scores.
          std::optional<int64_t> headFlops =
              (CheckedInt(2) * batch * tokens * (CheckedInt(3) * dim * headDim + headDim * dim) +
               CheckedInt(4) * batch * tokens * tokens * headDim)
                  .get();
          if (!headFlops)
            return op->emitOpError("the FLOPs of one head overflow int64");
          balance.noteAttention(attention, *headFlops);
        } else {
          callKernel("htp_cpu_attention_f32",
                     {pointerOf(attention.getInput()), pointerOf(attention.getQkvWeight()),
                      pointerOf(attention.getQkvBias()), pointerOf(attention.getProjWeight()),
                      optionalPointerOf(attention.getProjBias()),
                      pointerOf(attention.getResult()), scratch, constantI64(batch),
                      constantI64(tokens), constantI64(dim), constantI64(heads),
                      constantI64(headDim)});
        }
        CheckedInt rows = CheckedInt(batch) * tokens, inner = CheckedInt(heads) * headDim;
        return addFlops(op, CheckedInt(2) * rows * dim * 3 * inner +              // qkv
                                CheckedInt(4) * batch * heads * tokens * tokens * headDim + // q·kᵀ, p·v
                                CheckedInt(2) * rows * inner * dim);                // proj
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
        Value tanhApprox = LLVM::ConstantOp::create(builder, loc, i32Type, tanhFlag(gelu));
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
      .Case([&](MLPOp mlp) -> LogicalResult {
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
             constantI32(tanhFlag(mlp))});
        returnIfFailed(status);
        std::optional<int64_t> unitFlops = (CheckedInt(4) * rows * dim * width).get();
        if (!unitFlops)
          return op->emitOpError("the FLOPs of one MLP unit overflow int64");
        balance.noteMLP(mlp, hidden / width, *unitFlops);
        return addFlops(op, CheckedInt(4) * rows * dim * hidden);
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

/// The name the signature gives argument `index`: its htp.param (timm's
/// name) or htp.input, else "argN".
std::string EntryLowering::argumentName(unsigned index) {
  if (auto param = func.getArgAttrOfType<StringAttr>(index, kParamAttrName))
    return param.getValue().str();
  if (auto input = func.getArgAttrOfType<StringAttr>(index, kInputAttrName))
    return input.getValue().str();
  return "arg" + std::to_string(index);
}

/// The signature (runtime/htp_entry.h, format 2) as compact JSON. Every
/// name was checked by checkSupported; the writer escapes the rest.
std::string EntryLowering::signatureJSON() {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream json(os);
  auto writeShape = [&](Type type) {
    json.attributeArray("shape", [&] {
      for (int64_t dim : cast<RankedTensorType>(type).getShape())
        json.value(dim);
    });
  };
  json.object([&] {
    json.attribute("htp_entry", HTP_ENTRY_FORMAT_VERSION);
    json.attribute("entry", name);
    json.attributeArray("args", [&] {
      for (unsigned index = 0; index < numArgs; ++index)
        json.object([&] {
          json.attribute("name", argumentName(index));
          bool param = func.getArgAttrOfType<StringAttr>(index, kParamAttrName) != nullptr;
          json.attribute("role", param ? "param" : "input");
          json.attribute("dtype", "f32");
          writeShape(func.getArgumentTypes()[index]);
          if (std::optional<ShardRecord> shard = *readShard(func, index))
            json.attributeObject("shard", [&] {
              json.attribute("dim", shard->dim);
              json.attribute("parts", shard->parts);
              json.attribute("layout", shard->layout);
            });
        });
    });
    json.attributeArray("results", [&] {
      for (unsigned index = 0; index < numResults; ++index)
        json.object([&] {
          json.attribute("name", "result" + std::to_string(index));
          json.attribute("dtype", "f32");
          writeShape(func.getResultTypes()[index]);
        });
    });
    json.attribute("workspace_bytes", workspaceBytes);
    json.attribute("flops", gemmFlops);
    if (auto tp = func->getAttrOfType<IntegerAttr>(kTPAttrName))
      json.attribute("tp", tp.getInt());
    if (balance.layers)
      json.attributeObject("balance", [&] {
        json.attribute("layers", balance.layers);
        json.attribute("model_dim", balance.modelDim);
        json.attribute("heads", balance.heads);
        json.attribute("head_dim", balance.headDim);
        json.attribute("head_flops", balance.headFlops);
        json.attribute("mlp_units", balance.mlpUnits);
        json.attribute("mlp_unit_width", balance.mlpUnitWidth);
        json.attribute("mlp_unit_flops", balance.mlpUnitFlops);
      });
  });
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
  if (failed(readPlacement()))
    return failure();

  // i32 @"htp.entry.F"(ptr %rt_ctx, ptr %buffers)
  builder.setInsertionPoint(func);
  auto entryType = LLVM::LLVMFunctionType::get(i32Type, {ptrType, ptrType});
  entry = LLVM::LLVMFuncOp::create(builder, func.getLoc(), HTP_ENTRY_SYMBOL_PREFIX + name,
                                   entryType);
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

  defineStringGlobal(builder, module, HTP_SIGNATURE_SYMBOL_PREFIX + name, signatureJSON());
  func.erase();
  return success();
}

struct LowerToRuntimePass : htp::impl::HTPLowerToRuntimeBase<LowerToRuntimePass> {
  using HTPLowerToRuntimeBase::HTPLowerToRuntimeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkSymbols(module)))
      return signalPassFailure();
    // Each function is first moved out of the way: a func.func named like a
    // kernel (@htp_cpu_linear_f32) or a runtime function must not meet the
    // declaration the lowering adds. The temporary names start with a
    // control character, which no accepted function name has.
    SmallVector<std::pair<func::FuncOp, std::string>> entries;
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      entries.push_back({func, func.getSymName().str()});
    for (auto [index, entry] : llvm::enumerate(entries)) {
      std::string temporary;
      for (unsigned attempt = 0; temporary.empty() || module.lookupSymbol(temporary); ++attempt)
        temporary = "\x01htp.lowering." + std::to_string(index) + "." + std::to_string(attempt);
      entry.first.setSymName(temporary);
    }
    SmallVector<std::string> publicNames;
    for (auto &[func, name] : entries) {
      if (func.isPublic())
        publicNames.push_back(name);
      if (failed(EntryLowering(func, name, module).run()))
        return signalPassFailure();
    }
    if (publicNames.size() == 1) {
      OpBuilder builder(module.getContext());
      defineStringGlobal(builder, module, HTP_DEFAULT_ENTRY_SYMBOL, publicNames.front());
    }
  }

  /// Refuses functions the lowering cannot name, and symbols in the way of
  /// those it creates: every kernel and runtime function it declares is
  /// htp_*, every symbol it defines htp.* (runtime/htp_entry.h).
  static LogicalResult checkSymbols(ModuleOp module) {
    for (Operation &op : *module.getBody()) {
      auto symbol = dyn_cast<SymbolOpInterface>(op);
      if (!symbol)
        continue;
      StringRef name = symbol.getName();
      if (auto func = dyn_cast<func::FuncOp>(op)) {
        if (func.isDeclaration())
          return func.emitError("external functions are not supported in htp modules");
        std::string problem = nameProblem(name);
        if (!problem.empty())
          return func.emitError() << "function name " << quotedName(name) << " " << problem
                                  << " (a name must be 1 to "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_NAME)
                                  << " bytes of UTF-8 without control characters)";
        continue;
      }
      if (name.starts_with("htp_") || name.starts_with("htp."))
        return op.emitError() << "symbol " << quotedName(name)
                              << " is reserved: --htp-lower-to-runtime declares htp_* and "
                                 "defines htp.* symbols";
    }
    return success();
  }
};

} // namespace
