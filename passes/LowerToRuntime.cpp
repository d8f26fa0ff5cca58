//===- LowerToRuntime.cpp - htp functions to kernel-calling entry points --===//
//
// This file implements the htp-lower-to-runtime pass, which turns each
// func.func written in htp ops into an LLVM-dialect function with the entry
// ABI of runtime/htp_entry.h, calling the CPU kernels of
// kernels/htp_kernels.h, and writes each function's JSON signature.
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
#include "runtime/htp_entry.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <limits>

namespace mlir::htp {
#define GEN_PASS_DEF_HTPLOWERTORUNTIME
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

constexpr int64_t kAlignment = 64;

/// An int64 size or count that remembers an overflow instead of wrapping:
/// every product and sum the lowering computes (bytes, elements, FLOPs,
/// offsets) goes through it, and the caller reports an empty one.
class CheckedInt {
public:
  CheckedInt(int64_t value) : value(value) {}
  static CheckedInt overflowed() { return CheckedInt(); }
  CheckedInt operator*(CheckedInt other) const {
    return value && other.value ? CheckedInt(llvm::checkedMul(*value, *other.value)) : overflowed();
  }
  CheckedInt operator+(CheckedInt other) const {
    return value && other.value ? CheckedInt(llvm::checkedAdd(*value, *other.value)) : overflowed();
  }
  std::optional<int64_t> get() const { return value; }

private:
  CheckedInt() = default;
  explicit CheckedInt(std::optional<int64_t> value) : value(value) {}
  std::optional<int64_t> value;
};

/// `bytes` rounded up to the workspace alignment.
CheckedInt alignUp(int64_t bytes) {
  std::optional<int64_t> padded = llvm::checkedAdd(bytes, kAlignment - 1);
  return padded ? CheckedInt(*padded / kAlignment * kAlignment) : CheckedInt::overflowed();
}

/// Elements of a static shape (MLIR's getNumElements wraps).
CheckedInt elementCount(RankedTensorType type) {
  CheckedInt count = 1;
  for (int64_t dim : type.getShape())
    count = count * dim;
  return count;
}

/// Product of all dims but the last: the rows an op applies its last-dim
/// transform to. Called only on types checkSupported found to fit.
int64_t leadingRows(RankedTensorType type) {
  return type.getNumElements() / std::max<int64_t>(type.getShape().back(), 1);
}

/// Bytes of an f32 tensor; checkSupported made sure every value's fits.
int64_t byteSize(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getNumElements() * static_cast<int64_t>(sizeof(float));
}

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

/// First-fit allocation of byte ranges in the workspace over live intervals.
class WorkspaceAllocator {
public:
  /// The offset of a new slot of `bytes`, or none when the workspace would
  /// pass HTP_ENTRY_MAX_WORKSPACE_BYTES (so no offset can overflow).
  std::optional<int64_t> allocate(int64_t bytes) {
    std::optional<int64_t> padded = alignUp(bytes).get();
    if (!padded || *padded > HTP_ENTRY_MAX_WORKSPACE_BYTES)
      return std::nullopt;
    int64_t offset = 0;
    for (auto [begin, end] : live) { // `live` is kept sorted by begin
      if (offset + *padded <= begin)
        break;
      offset = std::max(offset, end);
    }
    if (offset + *padded > HTP_ENTRY_MAX_WORKSPACE_BYTES)
      return std::nullopt;
    live.insert(std::upper_bound(live.begin(), live.end(), std::make_pair(offset, offset)),
                {offset, offset + *padded});
    highWater = std::max(highWater, offset + *padded);
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
  /// `name` is the function's own name: the pass renamed `func` out of the
  /// way of the symbols it creates.
  EntryLowering(func::FuncOp func, StringRef name, ModuleOp module)
      : func(func), name(name.str()), module(module), builder(module.getContext()),
        ptrType(LLVM::LLVMPointerType::get(module.getContext())),
        i64Type(builder.getI64Type()), i32Type(builder.getI32Type()) {}

  LogicalResult run();

private:
  LogicalResult checkSupported();
  LogicalResult planBuffers();
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
  for (Operation &op : func.getBody().front()) {
    if (isa<func::ReturnOp>(op) || op.getDialect() == op.getContext()->getLoadedDialect<HTPDialect>())
      continue;
    return op.emitOpError("is not supported by --htp-lower-to-runtime (only htp ops and "
                          "func.return may appear in an htp entry point)");
  }
  // Every size below is computed from these types: their bytes must fit.
  auto bytesFit = [](Type type) {
    return (elementCount(cast<RankedTensorType>(type)) * static_cast<int64_t>(sizeof(float)))
        .get()
        .has_value();
  };
  for (auto [index, type] : llvm::enumerate(func.getArgumentTypes()))
    if (!bytesFit(type))
      return func.emitError() << "argument #" << index << " of type " << type
                              << " has more bytes than int64 holds";
  for (auto [index, type] : llvm::enumerate(func.getResultTypes()))
    if (!bytesFit(type))
      return func.emitError() << "result #" << index << " of type " << type
                              << " has more bytes than int64 holds";
  // BLAS takes its dims and leading dims as int: a larger GEMM dim would wrap.
  constexpr int64_t kMaxGemmDim = std::numeric_limits<int32_t>::max();
  for (Operation &op : func.getBody().front().without_terminator())
    for (Value value : llvm::concat<Value>(op.getOperands(), op.getResults())) {
      auto type = cast<RankedTensorType>(value.getType());
      if (!bytesFit(type))
        return op.emitOpError() << "operand or result of type " << type
                                << " has more bytes than int64 holds";
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
/// none; -1: more than int64 counts). One place for the formulas: the
/// kernels' and the hooks' headers.
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

LogicalResult EntryLowering::planBuffers() {
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
  auto tooLarge = [&](Operation &op, StringRef what) {
    return op.emitOpError() << what << " would make the workspace larger than "
                            << HTP_ENTRY_MAX_WORKSPACE_BYTES
                            << " bytes (HTP_ENTRY_MAX_WORKSPACE_BYTES)";
  };
  for (Operation &op : body.without_terminator()) {
    for (Value result : op.getResults())
      if (!placement.count(result)) {
        std::optional<int64_t> offset = allocator.allocate(byteSize(result));
        if (!offset)
          return tooLarge(op, "its result");
        placement[result] = {Placement::Workspace, *offset};
      }
    int64_t floats = scratchFloats(&op);
    std::optional<int64_t> scratchBytes =
        (CheckedInt(floats) * static_cast<int64_t>(sizeof(float))).get();
    if (floats < 0 || !scratchBytes)
      return op.emitOpError("needs more kernel scratch than int64 counts");
    if (floats) {
      std::optional<int64_t> offset = allocator.allocate(*scratchBytes);
      if (!offset)
        return tooLarge(op, "its kernel scratch");
      scratchOffset[&op] = *offset;
      allocator.release(*offset);
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
  if (failed(planBuffers()))
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
