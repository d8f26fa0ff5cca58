# lit configuration of the HTP suites: dialect/, passes/, e2e/.
import os
import shutil
import subprocess

import lit.formats

config.name = "HTP"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.htp_binary_dir, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "CMakeLists.txt", "ref",
                   "runtime", "planner", "kernels", "executor", "Inputs"]

tools = os.path.join(config.htp_binary_dir, "tools")
config.substitutions.append(("%htp-opt", os.path.join(tools, "htp-opt", "htp-opt")))
config.substitutions.append(("%htp-run", os.path.join(tools, "htp-run", "htp-run")))
config.substitutions.append(("%htp-compile", os.path.join(tools, "htp-compile", "htp-compile")))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%gen-vit", os.path.join(config.htp_source_dir, "examples", "gen_vit.py")))
config.substitutions.append(("%check-e2e", os.path.join(config.htp_source_dir, "test", "ref", "check_e2e.py")))
config.substitutions.append(("%examples", os.path.join(config.htp_source_dir, "examples")))
config.substitutions.append(("%inputs", os.path.join(config.htp_source_dir, "test", "Inputs")))
# Hand-written blocks built by test/executor (fake_tp_block.c): tp 2 and 3,
# and blocks that claim more than a machine holds.
config.substitutions.append(("%fake-blocks", os.path.join(config.htp_binary_dir, "test", "executor")))
config.substitutions.append(("%FileCheck", os.path.join(config.llvm_tools_dir, "FileCheck")))
config.substitutions.append(("%not", os.path.join(config.llvm_tools_dir, "not")))

# FileCheck and not by their plain names too.
config.environment["PATH"] = os.pathsep.join([config.llvm_tools_dir, config.environment.get("PATH", "")])
# One BLAS thread: tests share two cores with the rest of the suite.
config.environment["OPENBLAS_NUM_THREADS"] = "1"

# --param device=checked: htp-run's default device is the checked device
# (kernels/checked: the CPU behind a GPU's contracts), so that every e2e test
# also runs as on a GPU (ctest's lit.checked). Tests that state something of
# the CPU itself say `UNSUPPORTED: checked-device` and why.
device = lit_config.params.get("device", "cpu")
if device not in ("cpu", "checked"):
    lit_config.fatal("--param device=%s: use cpu or checked" % device)
if device == "checked":
    config.environment["HTP_DEVICE"] = "checked"
    config.available_features.add("checked-device")
    # Its own Output folders: ctest runs lit and lit.checked at once, and the
    # tests' %t files must not be shared.
    config.test_exec_root = os.path.join(config.htp_binary_dir, "test-checked")

def has_gpu():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20)
        return out.returncode == 0 and b"GPU" in out.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False

if config.have_cuda_build and has_gpu():
    config.available_features.add("cuda-gpu")

# htp-plot (a Python script, run from the source tree) needs matplotlib.
# Its copy in the build tree (tools/htp-plot/CMakeLists.txt) also knows the
# Python the build found matplotlib for. The longer name goes first: lit
# substitutes in order.
config.substitutions.append(("%htp-plot-built", os.path.join(tools, "htp-plot", "htp-plot")))
config.substitutions.append(("%htp-plot", os.path.join(config.htp_source_dir, "tools", "htp-plot", "htp-plot")))
if subprocess.run([config.python, "-c", "import matplotlib"], capture_output=True).returncode == 0:
    config.available_features.add("matplotlib")

# --elastic under mpirun needs an MPI with ULFM: scripts/setup.sh installs
# Open MPI 5 into .ompi5/ and scripts/test.sh builds build-asan against it
# (build/ keeps Debian's Open MPI 4, which has none). elastic-mpi.test runs
# that htp-run (MLIR off: it runs .so files from build/'s htp-compile)
# under that mpirun. HTP_ULFM_HTP_RUN names another such htp-run.
ulfm_mpirun = os.path.join(config.htp_source_dir, ".ompi5", "bin", "mpirun")
ulfm_htp_run = os.environ.get("HTP_ULFM_HTP_RUN") or os.path.join(
    config.htp_source_dir, "build-asan", "tools", "htp-run", "htp-run")

def links_ulfm_mpi(binary):
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return os.path.join(config.htp_source_dir, ".ompi5", "lib", "libmpi.so") in out

if os.access(ulfm_mpirun, os.X_OK) and os.access(ulfm_htp_run, os.X_OK) and links_ulfm_mpi(ulfm_htp_run):
    config.available_features.add("ulfm")
    config.substitutions.append(("%ulfm-htp-run", ulfm_htp_run))
    # Fault tolerance on, and the transports that have it (UCX's has not):
    # shared memory between the processes of a node (TCP alone sometimes
    # lost a live process when two died at once: DESIGN §12), TCP beyond.
    # A shrunk world leaves MPI unfinalized (Open MPI 5's MPI_Finalize can
    # wait for a dead process: DESIGN §12), so LeakSanitizer would report
    # MPI's memory.
    # Every launch bounded (timeout kills mpirun, which kills its processes):
    # a run that hangs fails its test in minutes instead of holding CI (one
    # hang of a standby rejoin was seen once on a loaded machine: DESIGN §12).
    # A process stuck in a shrink past its --timeout is ended by htp's
    # watchdog; HTP_WATCHDOG_STACKS has it print its threads' stacks first
    # (through gdb, where installed), for the open hang (DESIGN §12).
    bounded = "timeout -k 10 120 env ASAN_OPTIONS=detect_leaks=0 HTP_WATCHDOG_STACKS=1 "
    config.substitutions.append(("%ulfm-mpirun", bounded + ulfm_mpirun +
                                 " --with-ft ulfm --mca pml ob1 --mca btl sm,tcp,self"))
    # The same launcher with its fault tolerance off (the default).
    config.substitutions.append(("%ulfm-launcher-noft", bounded + ulfm_mpirun))
    config.environment["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
    for name in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        config.environment[name] = "1"
