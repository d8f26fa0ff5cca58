//===- Compiler.cpp - Parse, lower, JIT or emit an htp block --------------===//
//
// This file implements the compiler half of htp-run (DESIGN §7): the JIT
// behind the C vtable of tools/htp-run/entry.h, and the object emitter that
// htp-compile uses. Everything upstream of the LLVM dialect is the same
// htp-pipeline that htp-opt runs.
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"

#include "dialect/HTPDialect.h"
#include "passes/Passes.h"
#include "runtime/htp_entry.h"
#include "tools/compiler/Nesting.h"
#include "tools/compiler/OutOfMemory.h"
#include "tools/htp-run/entry.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"

#include <cstdlib>
#include <cstring>

using namespace mlir;

std::unique_ptr<MLIRContext> htp::makeCompilerContext() {
  DialectRegistry registry;
  registry.insert<htp::HTPDialect, func::FuncDialect, LLVM::LLVMDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadAllAvailableDialects();
  // A diagnostic names the op and the source line; a dump of the op half-way
  // through the pipeline (renamed, partly lowered) would only confuse.
  context->printOpOnDiagnostic(false);
  return context;
}

/// Parses the module at `path` (a regular file) into `sourceMgr`, which the
/// caller keeps, with its diagnostic handler, for as long as the module's
/// locations may be reported (the pipeline's errors too).
static OwningOpRef<ModuleOp> parseFile(MLIRContext &context, const std::string &path,
                                       llvm::SourceMgr &sourceMgr,
                                       llvm::raw_ostream &errorStream) {
  // Said as MLIR says its diagnostics: "FILE: error: what".
  // A device or a pipe would be read until memory runs out: regular files only.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) && !llvm::sys::fs::is_regular_file(status)) {
    errorStream << path << ": error: not a regular file (a directory, device or pipe?)\n";
    return nullptr;
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file = llvm::MemoryBuffer::getFile(path);
  if (!file) {
    errorStream << path << ": error: cannot open: " << file.getError().message() << "\n";
    return nullptr;
  }
  std::string deep = htp::nestingProblem((*file)->getBuffer());
  if (!deep.empty()) {
    errorStream << path << ": error: " << deep << "\n";
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

/// The functions a module defines that a caller can run.
static SmallVector<StringRef> publicFunctions(ModuleOp module) {
  SmallVector<StringRef> names;
  for (auto func : module.getOps<func::FuncOp>())
    if (func.isPublic() && !func.isDeclaration())
      names.push_back(func.getSymName());
  return names;
}

OwningOpRef<ModuleOp> htp::compileFile(MLIRContext &context, const std::string &path,
                                       std::string &entry, std::string &errors, int64_t tp,
                                       bool grad, ArrayRef<int64_t> shares, int64_t spare) {
  llvm::raw_string_ostream errorStream(errors);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context, errorStream);
  OwningOpRef<ModuleOp> module = parseFile(context, path, sourceMgr, errorStream);
  if (!module)
    return nullptr;

  // Only the top module's functions are compiled: one in a nested module
  // was left out of the .so without a word.
  for (auto nested : module->getOps<ModuleOp>()) {
    nested.emitError() << "a nested module: htp compiles the functions of the top module "
                          "only; move them there";
    return nullptr;
  }
  SmallVector<StringRef> publicNames = publicFunctions(*module);
  if (entry.empty()) {
    if (publicNames.size() != 1) {
      errorStream << path << ": " << (publicNames.empty() ? "no public function to run"
                                                           : "several public functions (")
                  << llvm::join(publicNames, ", ")
                  << (publicNames.empty() ? "" : "); choose one with --entry")
                  << (grad && !publicNames.empty()
                          ? " (or NAME_grad, the backward --htp-grad writes for a loss "
                            "function NAME)"
                          : "")
                  << "\n";
      return nullptr;
    }
    entry = publicNames.front().str();
  }
  // An entry the pipeline writes (htp-grad's NAME_grad) is looked for after it.
  std::string sourceNames =
      publicNames.empty() ? "(no public functions)" : llvm::join(publicNames, ", ");
  bool entryInSource = llvm::is_contained(publicNames, entry);
  if (!entryInSource && !(grad && StringRef(entry).ends_with("_grad"))) {
    errorStream << path << ": unknown entry '" << entry << "'; the file defines: " << sourceNames
                << "\n";
    return nullptr;
  }

  // tp, shares and spare are checked by the split pass, which the pipeline
  // runs at every tp (htp-opt's users get the same checks).
  // The pipeline splits the block for `tp` itself. A function split before
  // (or only marked so) would either meet the split pass again or keep a tp
  // the run did not ask for: refused here, for the JIT and htp-compile alike.
  for (auto func : module->getOps<func::FuncOp>())
    if (auto marked = func->getAttrOfType<IntegerAttr>(htp::kTPAttrName)) {
      func.emitError() << "@" << func.getSymName() << " is already marked " << htp::kTPAttrName << " = " << marked.getInt()
                       << " (split by --htp-tensor-parallel, or by hand); htp-run and "
                          "htp-compile split a block themselves: give them the unsplit block "
                          "and --tp "
                       << marked.getInt();
      return nullptr;
    }
  // The entry chosen here is the .so's default (htp-run FILE.so then needs
  // no --entry), as the only public function is.
  (*module)->setAttr(htp::kDefaultEntryAttrName, StringAttr::get(&context, entry));
  PassManager pm(&context);
  htp::HTPPipelineOptions options;
  options.tp = tp;
  options.shares = shares;
  options.spare = spare;
  options.grad = grad;
  htp::buildHTPPipeline(pm, options);
  if (failed(pm.run(*module)))
    return nullptr;
  if (!entryInSource && !module->lookupSymbol(HTP_ENTRY_SYMBOL_PREFIX + entry)) {
    errorStream << path << ": unknown entry '" << entry << "'; the file defines: " << sourceNames
                << " (and --htp-grad writes NAME_grad only for a function whose result #0 is an "
                   "htp.cross_entropy loss)\n";
    return nullptr;
  }
  return module;
}

/// A target machine for this host, position independent so the object can go
/// into a shared library.
static std::unique_ptr<llvm::TargetMachine> makeHostTargetMachine(std::string &errors) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    errors += llvm::toString(builder.takeError()) + "\n";
    return nullptr;
  }
  builder->setRelocationModel(llvm::Reloc::PIC_);
  builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto machine = builder->createTargetMachine();
  if (!machine) {
    errors += llvm::toString(machine.takeError()) + "\n";
    return nullptr;
  }
  return std::move(*machine);
}

bool htp::emitObjectFile(ModuleOp module, const std::string &objectPath, std::string &errors) {
  std::unique_ptr<llvm::TargetMachine> machine = makeHostTargetMachine(errors);
  if (!machine)
    return false;
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule) {
    errors += "translation to LLVM IR failed\n";
    return false;
  }
  llvmModule->setDataLayout(machine->createDataLayout());
  llvmModule->setTargetTriple(machine->getTargetTriple());
  if (llvm::Error error = makeOptimizingTransformer(3, 0, machine.get())(llvmModule.get())) {
    errors += llvm::toString(std::move(error)) + "\n";
    return false;
  }
  std::error_code code;
  llvm::ToolOutputFile output(objectPath, code, llvm::sys::fs::OF_None);
  if (code) {
    errors += "cannot write '" + objectPath + "': " + code.message() + "\n";
    return false;
  }
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, output.os(), nullptr,
                                   llvm::CodeGenFileType::ObjectFile)) {
    errors += "the host target cannot emit object files\n";
    return false;
  }
  codegen.run(*llvmModule);
  output.keep();
  return true;
}

//===----------------------------------------------------------------------===//
// The JIT, behind the executor's C vtable
//===----------------------------------------------------------------------===//

namespace {
/// What a JIT-loaded entry keeps alive: the engine owns the code.
struct JITEntry {
  std::unique_ptr<MLIRContext> context;
  std::unique_ptr<ExecutionEngine> engine;
};
} // namespace

static void copyError(const std::string &message, char *err, size_t errSize) {
  if (!err || errSize == 0)
    return;
  std::string text = message;
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  std::strncpy(err, text.c_str(), errSize - 1);
  err[errSize - 1] = '\0';
}

static int jitLoad(const char *path, const char *entry, const htp_compile_options *options,
                   htp_compiled *out, char *err, size_t errSize) {
  std::string errors;
  auto jit = std::make_unique<JITEntry>();
  jit->context = htp::makeCompilerContext();
  std::string entryName = entry ? entry : "";
  OwningOpRef<ModuleOp> module =
      htp::compileFile(*jit->context, path, entryName, errors, options ? options->tp : 1,
                       /*grad=*/true,
                       options && options->num_shares
                           ? ArrayRef<int64_t>(options->shares, options->num_shares)
                           : ArrayRef<int64_t>(),
                       options ? options->spare : 0);
  if (!module) {
    // htp-run says "htp-run: error: " before it: "FILE:LINE:COL: error: what"
    // becomes "FILE:LINE:COL: what" (its first line; notes keep theirs).
    const size_t tag = errors.find(": error: "), line = errors.find('\n');
    if (tag != std::string::npos && tag < line)
      errors.erase(tag + 2, 7);
    copyError(errors, err, errSize);
    return 1;
  }
  // Warnings of a successful compile (a bf16 block left without balance
  // hooks, say) go to the user as they would from htp-opt.
  llvm::errs() << errors;

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = makeOptimizingTransformer(3, 0, nullptr);
  engineOptions.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  // LLVM's perf listener writes a dump per run under $JITDUMPDIR/.debug/jit,
  // else the temporary directory's (none, silently, where it cannot): only
  // for a user profiling with perf.
  const char *perf = std::getenv("HTP_JIT_PERF");
  engineOptions.enablePerfNotificationListener = perf && std::strcmp(perf, "1") == 0;
  auto engine = ExecutionEngine::create(*module, engineOptions);
  if (!engine) {
    copyError("JIT failed: " + llvm::toString(engine.takeError()), err, errSize);
    return 1;
  }
  jit->engine = std::move(*engine);
  jit->engine->initialize();

  // The lowering prefixes what it defines (runtime/htp_entry.h), so an entry
  // named like a C library or runtime function cannot stand in for it.
  auto function = jit->engine->lookup(HTP_ENTRY_SYMBOL_PREFIX + entryName);
  auto signature = jit->engine->lookup(HTP_SIGNATURE_SYMBOL_PREFIX + entryName);
  if (!function || !signature) {
    std::string message = "JIT lookup of '" + entryName + "' failed";
    if (!function)
      message += ": " + llvm::toString(function.takeError());
    if (!signature)
      message += ": " + llvm::toString(signature.takeError());
    copyError(message, err, errSize);
    return 1;
  }
  out->fn = reinterpret_cast<htp_entry_fn>(*function);
  out->signature = static_cast<const char *>(*signature);
  out->handle = jit.release();
  return 0;
}

static void jitUnload(htp_compiled *compiled) {
  if (!compiled)
    return;
  delete static_cast<JITEntry *>(compiled->handle);
  compiled->handle = nullptr;
  compiled->fn = nullptr;
  compiled->signature = nullptr;
}

static int jitList(const char *path, void (*each)(void *user, const char *name), void *user,
                   char *err, size_t errSize) {
  std::string errors;
  std::unique_ptr<MLIRContext> context = htp::makeCompilerContext();
  llvm::raw_string_ostream errorStream(errors);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, context.get(), errorStream);
  OwningOpRef<ModuleOp> module = parseFile(*context, path, sourceMgr, errorStream);
  if (!module) {
    copyError(errors, err, errSize);
    return -1;
  }
  SmallVector<StringRef> names = publicFunctions(*module);
  for (StringRef name : names)
    each(user, name.str().c_str());
  return static_cast<int>(names.size());
}

static void exitOnOutOfMemoryC(const char *tool, void (*cleanup)(void)) {
  mlir::htp::exitOnOutOfMemory(tool, cleanup);
}

extern "C" const htp_compiler *htp_jit_compiler(void) {
  static const htp_compiler jit = {jitLoad, jitUnload, jitList, exitOnOutOfMemoryC};
  return &jit;
}
