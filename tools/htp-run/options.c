/*===- tools/htp-run/options.c - htp-run's command line ------------------===*
 *
 * This file implements options.h with getopt_long: flags take their value
 * as the next argument or after '=' (--iters=5), may come before or after
 * the file (argv is not permuted), and "--" ends them. Values are checked here; the names of the
 * runtime's enums (policy, imputation, selection) come from the runtime's
 * own tables (htp_policy_parse/_name, ...), never from a list kept here.
 * Whether this build can act on a value is htp_run_check_implemented's job,
 * so that the "not implemented yet" messages live in one place.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/options.h"

#include "tools/htp-run/errors.h"

#include "runtime/htp_entry.h"
#include "kernels/htp_kernel_table.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

/* htp-run --help, a paragraph an entry. */
static const char *const HELP[] = {
    "usage: htp-run FILE.mlir|FILE.so [options]\n",
    "\n"
    "Runs an htp block: compiles FILE.mlir with the JIT (or loads FILE.so written by\n"
    "htp-compile), binds its parameters and inputs, runs it on --tp ranks, times every\n"
    "iteration and reports. On the CPU (default) or on CUDA GPUs (--device cuda; see\n"
    "GPUs below).\n",
    "\n"
    "options (a value follows its flag or an '=': --iters 5, --iters=5; flags may\n"
    "come before or after the file, long ones shortened to a unique prefix, and\n"
    "'--' ends them. A flag that takes one value may be given once: only --input,\n"
    "--output, --slow, --sms and --fault repeat):\n"
    "  --entry F             entry function (default: the only public function; for a\n"
    "                        .so, the entry htp-compile marked as the default)\n"
    "  --iters K             timed iterations, 1 <= K <= 10^7 (default 10)\n"
    "  --warmup W            untimed iterations before them, 0 <= W <= 10^7\n"
    "                        (default 1)\n"
    "  --seed S              seed of the random data, 0 <= S < 2^64 (default 0)\n"
    "  --weights W.safetensors\n"
    "                        bind parameters by their htp.param names (timm names), at\n"
    "                        their GLOBAL (unsplit) shapes whatever --tp is; each rank\n"
    "                        gets its slice. Every parameter must be in the file with\n"
    "                        its exact shape. An f32 block reads F32, F16, BF16 and\n"
    "                        F64 tensors (converted to f32); a bf16 block reads BF16\n"
    "                        (as is) and F32 (rounded), see bf16 below. Tensors the\n"
    "                        block does not use are skipped with a warning (a full\n"
    "                        checkpoint also holds patch_embed, ...). A regular file\n"
    "                        with a header of at most 100 MB\n"
    "  --input X.npy         data input ('<f4' or '<f8', C order, exactly the input's\n"
    "                        shape; a regular file, not a pipe or device; rounded to\n"
    "                        bf16 for a bf16 block); give it once per data input, in\n"
    "                        argument order\n"
    "  --output Y.npy        write a result of the last iteration ('<f4', a bf16\n"
    "                        result widened exactly; rank 0's, every rank has the\n"
    "                        whole result); give it once per result to save, in\n"
    "                        result order (a path that exists must be a regular file)\n"
    "  --report table|json   table (default): the iterations and a summary line;\n"
    "                        json: exactly one JSON object on stdout (entry, file,\n"
    "                        iters, warmup, seed, tp, backend, device, policy, flops,\n"
    "                        block_flops, median_ms, min_ms, mean_ms, max_ms, gflops,\n"
    "                        times_ms, rank_compute_ms, stragglers, check, balance,\n"
    "                        plan, inputs, params, outputs with their shapes)\n"
    "  --tp N                tensor-parallel ranks, 1 <= N <= 1024 (default 1). A\n"
    "                        .mlir is compiled split for N ranks\n"
    "                        (--htp-tensor-parallel); a .so runs at the tp it was\n"
    "                        compiled for (htp-compile --tp N), and a --tp that\n"
    "                        differs is an error\n"
    "  --shares S,S,...      (.mlir) split unevenly: rank r gets the heads and MLP\n"
    "                        units of each layer in proportion to its share, whole\n"
    "                        units only, e.g. --tp 4 --shares 3,3,2,1 for a rank\n"
    "                        that is half as fast (one share per rank; --tp, when\n"
    "                        left out, is their count). Weights are sliced from the\n"
    "                        global ones as for an even split, and the result is the\n"
    "                        same up to the order of sums. For a .so: htp-compile\n"
    "                        --shares\n"
    "  --spare P             (.mlir, --tp 2 or more) give every rank spare room: P\n"
    "                        percent (0 to 1000, default 0) more slots of each kind\n"
    "                        than the most heads or MLP units any rank owns,\n"
    "                        rounded up to whole units, with or without --shares.\n"
    "                        Room a run-time re-partition could move units into;\n"
    "                        for now the slots stay empty (zeros: the result is\n"
    "                        the same, and a balance policy computes only owned\n"
    "                        units). For a .so: htp-compile --spare\n"
    "  --backend local|mpi|nccl\n"
    "                        collectives backend (default local: one thread per rank\n"
    "                        in this process). mpi: one process per rank under\n"
    "                        mpirun (mpirun -np N htp-run ... --backend mpi); --tp,\n"
    "                        when given, must equal N; rank 0 reports and writes the\n"
    "                        outputs. nccl: one process per GPU under mpirun, with\n"
    "                        --device cuda only (mpirun -np N htp-run FILE.so\n"
    "                        --backend nccl --device cuda); rank r drives GPU r\n"
    "                        (modulo the GPUs on its host)\n"
    "  --device cpu|cuda|checked\n"
    "                        where each rank's buffers live and its kernels run\n"
    "                        (default cpu). cuda: GPU 0 for the local backend (the\n"
    "                        ranks share it), the rank's own GPU for nccl; needs an\n"
    "                        htp-run built with -DHTP_ENABLE_CUDA=ON and a GPU, else\n"
    "                        an error (exit 1). See GPUs below. checked: the CPU's\n"
    "                        kernels behind a GPU's contracts (memory the host\n"
    "                        cannot touch, checked bounds, CUDA scratch sizes, a\n"
    "                        stream busy HTP_CHECKED_LATENCY_US, default 200, after\n"
    "                        each kernel, HTP_CHECKED_MEMORY_MB of memory, default\n"
    "                        81920): what would fail on a GPU fails here.\n"
    "                        The environment's HTP_DEVICE, when set, is the default\n"
    "                        instead of cpu\n"
    "  --matmul-precision f32|tf32|bf16\n"
    "                        the precision of every product with a weight (each\n"
    "                        linear's x·wᵀ; with --train also dy·w and dyᵀ·x), as\n"
    "                        PyTorch's torch.set_float32_matmul_precision: f32\n"
    "                        (default, \"highest\"), tf32 (\"high\": operands rounded\n"
    "                        to 10 mantissa bits) or bf16 (\"medium\": 7 bits); the\n"
    "                        products are summed in f32. Faster where the device\n"
    "                        computes that format natively (CUDA's tensor cores;\n"
    "                        a CPU's AVX512-BF16 or AMX units, bf16 only: tf32 on\n"
    "                        a CPU, and bf16 on one without bf16 units, give the\n"
    "                        same numbers computed in f32, no faster). Attention's\n"
    "                        q·kᵀ and p·v stay f32; a bf16 block is unaffected.\n"
    "                        --check compares with the tp-1 build at the same\n"
    "                        precision, tolerance 4.9e-4 (tf32) or 3.9e-3 (bf16)\n"
    "  --sms R:COUNT         (--device cuda, --backend local) confine rank R's work\n"
    "                        to COUNT of the GPU's SMs (a green context; whole\n"
    "                        partition steps, 8 on sm_90), so it is slow in\n"
    "                        hardware; ranks not named use the whole GPU. R in\n"
    "                        [0, tp), COUNT >= 1, once per rank; repeatable. --slow\n"
    "                        still applies on top. --device checked counts the\n"
    "                        partitions as an H200's (132 SMs, 120 in groups of\n"
    "                        8) and refuses what the GPU would, running no slower\n"
    "  --policy none|resize|migrate|semi\n"
    "                        what the ranks do about stragglers (see Balancing):\n"
    "                          none     detect and trace only (default)\n"
    "                          resize   a straggler skips (prunes) a fraction gamma\n"
    "                                   of its work units, imputed (--impute):\n"
    "                                   approximate\n"
    "                          migrate  a straggler hands gamma of its units to\n"
    "                                   fast ranks, which compute them: exact\n"
    "                          semi     the worst stragglers migrate, mild ones\n"
    "                                   resize (deficit above the planner's\n"
    "                                   resize_limit, 0.25, migrates)\n"
    "                        resize, migrate and semi need a block with balance hooks:\n"
    "                        a .mlir run with --tp > 1 (or a .so from htp-compile\n"
    "                        --tp > 1)\n"
    "  --impute zero|same|average\n"
    "                        values of pruned units (resize, semi): zero (default),\n"
    "                        same (the unit's last computed value), average (per\n"
    "                        token, the mean of the kept units); same and average\n"
    "                        on the CPU only (--device cuda or checked: zero)\n"
    "  --same-max-age N      with --impute same: a unit's stored value stands in for\n"
    "                        it at most N steps after it was computed, zero after;\n"
    "                        0 is any age (default: 1 with --train, where an old\n"
    "                        batch's values replayed for many steps break the\n"
    "                        model; 0 otherwise)\n"
    "  --select random|importance|variation|displacement\n"
    "                        which units a straggler sheds (resize, migrate, semi):\n"
    "                        random (default: a permutation seeded with --seed),\n"
    "                        importance (least important first: per unit, an EWMA of\n"
    "                        mean |activation| x norm of its output weights, measured\n"
    "                        in the iterations before the plan change) or, with\n"
    "                        --train only, variation (the paper's priority: least\n"
    "                        change of the unit's weights over the last 16 steps\n"
    "                        first: the sum of its update norms) or displacement\n"
    "                        (least net change first: its weights now minus 16 to\n"
    "                        31 steps ago). Needs a block with balance hooks, as\n"
    "                        --policy does; all but random on the CPU only\n"
    "  --ewma-alpha A        the detector's smoothing of each rank's speed, the\n"
    "                        newest sample's weight in (0, 1] (default 0.3)\n"
    "  --hysteresis N        iterations in a row below 0.90 (at or above 0.95) of\n"
    "                        the fastest rank before a rank becomes (stops being) a\n"
    "                        straggler, 1 <= N <= 10^6 (default 3). Noisy clocks\n"
    "                        (short steps, more ranks than cores) want a smaller A\n"
    "                        and a larger N, or plans change every few iterations\n"
    "  --repartition R       rent or buy: while the same ranks migrate, add\n"
    "                        up the bytes the migration moves a step (in\n"
    "                        training each migrated unit's weights out and its\n"
    "                        gradient back; none in inference, where helpers keep\n"
    "                        what they were sent), and when they reach R times what\n"
    "                        moving those units for good would move once (weights\n"
    "                        and, with --train, optimizer moments), move them into\n"
    "                        the helpers' empty slots (uneven --shares, or spare\n"
    "                        room): the helpers own them from then on and nothing\n"
    "                        crosses per step. 0 turns it off. Default 2 (a move\n"
    "                        there and one back)\n"
    "  --slow R:F[@K]        make rank R slower by a factor F >= 1 from iteration K on\n"
    "                        (default 0), so it stays F times slower at whatever work\n"
    "                        the plan gives it: in a block with balance hooks each\n"
    "                        hook waits (F - 1) times its own time before the\n"
    "                        all-reduce; otherwise the rank sleeps (F - 1) times its\n"
    "                        call's compute time after each call.\n"
    "                        Repeatable (one factor per rank; the last applies)\n"
    "  --fault KIND:R@K      inject a runtime fault on rank R at iteration K, for tests\n"
    "                        and experiments: hang (stops answering), die (fails), or\n"
    "                        delay=S (sleeps S seconds every iteration from K on).\n"
    "                        Peers see a timeout or a remote failure and htp-run exits\n"
    "                        with an error (a lone rank's hang, at --tp 1, ends at its\n"
    "                        own --timeout), unless --train --elastic goes on without\n"
    "                        a rank that died or hung; rejoin (with --elastic) brings\n"
    "                        a lost rank back at step K. Repeatable\n"
    "  --timeout S           deadline of every collective in seconds (default 60): a\n"
    "                        rank that waits longer for a peer fails the run (under\n"
    "                        mpirun --elastic, a process stuck that long in Open\n"
    "                        MPI's shrink, or that long without a collective, ends\n"
    "                        itself, saying so)\n"
    "  --trace T.jsonl       write the planner's trace: one JSON line per rank per\n"
    "                        iteration (warm-up included; \"iter\" counts from 0;\n"
    "                        with --elastic a new world's lines go on from the step\n"
    "                        it resumes at, so replayed steps appear twice);\n"
    "                        written to T.jsonl.tmp and renamed at the run's end;\n"
    "                        with --train on the local backend only (not under\n"
    "                        mpirun yet)\n"
    "  --check               (.mlir) also compile and run the block unsplit (tp 1) on\n"
    "                        the CPU on the same data and report max |y_tp - y_1| /\n"
    "                        max |y_1| per result; exit 1 if above 1e-4 (2e-2 for a\n"
    "                        bf16 block). With --device cuda a tp-1 .so is checked\n"
    "                        too: against the same .so run on the CPU\n"
    "  --profile             time every call the block makes (each op, balance hook\n"
    "                        and all-reduce) in the timed iterations, each waited\n"
    "                        for before the next, on the device's clock; print\n"
    "                        each call's median per rank (the JSON report's\n"
    "                        \"profile\"). A profiled iteration is slower than an\n"
    "                        unprofiled one: no call overlaps the next. At most\n"
    "                        100000 timed iterations. With\n"
    "                        --train: the steps of the first epoch after its\n"
    "                        first (the grad entry's calls, then the optimizer's),\n"
    "                        printed after training; not with --elastic\n"
    "  -h, --help            print this help\n",
    "\n"
    "training (--train; see Training below):\n"
    "  --train               train the block's gradient entry instead of timing it\n"
    "  --data DIR            Fashion-MNIST's gzipped IDX files (default\n"
    "                        /usr/share/datasets/fashion-mnist: Debian's package\n"
    "                        dataset-fashion-mnist)\n"
    "  --epochs N            epochs in all, a resumed run's included, 1 <= N <= 100000\n"
    "                        (default 5)\n"
    "  --optimizer adamw|sgd AdamW (default; betas 0.9, 0.999, eps 1e-8) or SGD with\n"
    "                        momentum (PyTorch's)\n"
    "  --lr X                peak learning rate in [1e-30, 10] (default 1e-3 for adamw,\n"
    "                        0.05 for sgd)\n"
    "  --schedule cosine|constant\n"
    "                        cosine (default): lr * (1 + cos(pi t / T)) / 2 over the T\n"
    "                        steps of --epochs, no warm-up; constant: lr\n"
    "  --augment none|flip|flip-shift\n"
    "                        training batches as read (none, default), each image\n"
    "                        flipped left-right with probability 1/2 (flip), or\n"
    "                        flipped so and shifted by -2..2 pixels each way\n"
    "                        (flip-shift; background fills), drawn from (--seed,\n"
    "                        step): every rank and a resumed run see the same\n"
    "  --random-erase P      with probability P in [0, 1] (default 0) each training\n"
    "                        image gets one box of 2-40 % of its area, aspect\n"
    "                        0.3-3.3, filled with N(0, 1) noise (after --augment;\n"
    "                        drawn from (--seed, step) like it)\n"
    "  --label-smoothing E   training targets (1 - E) one-hot + E / 10, E in [0, 1)\n"
    "                        (default 0); the train loss is then against them, the\n"
    "                        test loss against the plain labels\n"
    "  --skip-nonfinite      a step whose loss is not finite (nan, inf) leaves the\n"
    "                        weights as they were and training goes on (counted in\n"
    "                        the epoch line and --metrics); 100 such steps in a row\n"
    "                        stop the run. Without it such a step stops the run with\n"
    "                        an error naming it, before its update. Either way a\n"
    "                        checkpoint holding a non-finite value is never written\n"
    "  --elastic K           when a rank dies (--fault die) or hangs (--fault hang,\n"
    "                        found by the --timeout deadline), go on without it\n"
    "                        instead of ending: every K steps and at each epoch's\n"
    "                        end each rank copies its shards of the model and its\n"
    "                        optimizer moments into host memory (a snapshot); a\n"
    "                        death ends the world, and a new one of the survivors\n"
    "                        (renumbered in order) resumes from the last snapshot\n"
    "                        in this process, replaying the steps since (at most\n"
    "                        K - 1) on the same batches, the lost rank's units\n"
    "                        spread over the survivors' empty slots. Needs room\n"
    "                        for them: a split with --spare (or --shares that leave\n"
    "                        it). --fault rejoin:R@K brings rank R back at step K\n"
    "                        (a snapshot there, then the full world). 0 chooses K\n"
    "                        after 7 timed steps so snapshots cost about 1 % of\n"
    "                        the steps' time; the run says what they cost. Under\n"
    "                        mpirun a killed process is lost (--fault die kills\n"
    "                        it): the survivors shrink the communicator and go on\n"
    "                        (each rank's snapshot copy is also kept by the next\n"
    "                        rank: two neighbours lost at once end the run).\n"
    "                        Needs an MPI with ULFM (Open MPI\n"
    "                        5; Debian's Open MPI 4 has none and refuses) and\n"
    "                        mpirun --with-ft ulfm --mca pml ob1 --mca btl\n"
    "                        sm,tcp,self; a rejoin needs --standby. A process\n"
    "                        that waits on no collective for --timeout is taken as\n"
    "                        hung and ends itself, saying so (a hang is a loss)\n"
    "  --standby N           (--elastic under mpirun) the last N processes of\n"
    "                        mpirun -np (tp + N) wait as standbys: at --fault\n"
    "                        rejoin:R@K one of them comes in as rank R (the\n"
    "                        others' state and books sent to it), and they are\n"
    "                        let go when the run ends. At most one rejoin per\n"
    "                        standby\n"
    "  --clock wall|cpu|units\n"
    "                        wall (default): the hooks and steps are timed by the\n"
    "                        wall clock and --slow waits. cpu: for more ranks than\n"
    "                        cores, each rank runs one kernel thread, its hooks are\n"
    "                        timed by that thread's CPU time (what the planner\n"
    "                        compares; --slow books F times it and waits not), and\n"
    "                        each step's time is modelled as on one device a rank:\n"
    "                        the slowest rank's CPU time in the step plus its --slow\n"
    "                        share (model_s per epoch in --metrics). units: as cpu,\n"
    "                        but the planner compares the units each hook ran times\n"
    "                        their FLOPs times --slow, not measured time, so plans\n"
    "                        depend on the units and --slow alone and runs that\n"
    "                        differ only in --select or --impute get the same plans\n"
    "                        (paired experiments). CPU and checked device only\n"
    "  --momentum X          SGD's momentum in [0, 1) (default 0.9)\n"
    "  --weight-decay X      in [0, 10] (default 0.05 for adamw, 0 for sgd); applied\n"
    "                        to matrices only, not to biases, norms, cls_token or\n"
    "                        pos_embed (timm's no-decay group)\n"
    "  --limit-train N       the first N training images (default all 60000)\n"
    "  --limit-test N        the first N test images (default all 10000)\n"
    "  --params P.safetensors\n"
    "                        starting weights by timm name at GLOBAL shapes (as\n"
    "                        --weights); default: a seeded init, trunc-normal std 0.02\n"
    "                        within [-2, 2] for weights, cls_token and pos_embed, 0 for\n"
    "                        biases, 1 and 0 for norms (from --seed, the same at every\n"
    "                        --tp)\n"
    "  --checkpoint C.safetensors\n"
    "                        after every epoch: every parameter gathered to its GLOBAL\n"
    "                        shape under its timm name, the training state in\n"
    "                        __metadata__ (htp.epoch, htp.step, htp.optimizer, ...);\n"
    "                        the optimizer's moments in C.safetensors.optim (m.NAME,\n"
    "                        and v.NAME for adamw)\n"
    "  --resume C.safetensors\n"
    "                        start from a checkpoint and its .optim after the epochs it\n"
    "                        has done (same --optimizer and batch; give the same other\n"
    "                        flags to continue the same run; any --tp)\n"
    "  --metrics M.json      rewritten whole after epochs (at most a tenth of the\n"
    "                        time, always after the last): per epoch train_loss,\n"
    "                        train_acc, test_loss, test_acc, epoch_s, eval_s,\n"
    "                        ms_per_step; the run's tp, policy, slow, optimizer,\n"
    "                        units_per_rank ([heads, MLP units]), ... With --resume\n"
    "                        a file there keeps its rows of the epochs the\n"
    "                        checkpoint holds (a gap is said)\n"
    "With --train, --seed seeds the init and the shuffle; --tp, --backend, --device,\n"
    "--matmul-precision (the backward's products too), --slow, --fault, --timeout,\n"
    "--policy, --impute, --select and --trace work as for a timed run, counting\n"
    "training steps from 0 (with --tp > 1 the gradient entry\n"
    "has balance hooks in forward and backward: a pruned unit gets no weight gradient\n"
    "and its part of the input's gradient is imputed as its activation was; a\n"
    "migrated unit's gradient returns to its owner every step, and its updated\n"
    "weights go out again); --iters, --warmup, --weights, --input, --output,\n"
    "--report and --check are refused.\n",
    "\n"
    "data defaults (without --weights / --input): seeded random data, each tensor\n"
    "drawn at its global shape from its own stream of (--seed, argument index), so\n"
    "a .so, the JIT and every --tp see the same numbers whatever --iters is:\n"
    "  data inputs                        N(0, 1)\n"
    "  parameters named *norm*.weight     1 (layer-norm scale)\n"
    "  parameters named *norm*.bias       0\n"
    "  all other parameters               N(0, 0.02^2) (timm's init std for weights;\n"
    "                                     biases get it too, so they are exercised)\n"
    "(a bf16 block gets the same f32 draws, each rounded to bf16).\n",
    "\n"
    "bf16. A block of bf16 tensors (examples/gen_vit.py --dtype bf16; \"dtype\":\n"
    "\"bf16\" in its signature) holds every tensor as bfloat16 and computes in f32:\n"
    "this CPU has no bf16 arithmetic, so its kernels widen their operands to f32,\n"
    "run the f32 kernel (f32 accumulation, f32 layer-norm statistics) and round\n"
    "each output once, to nearest even. Data is converted on load: --weights BF16\n"
    "tensors bind byte for byte, F32 tensors are rounded (a note on stderr says\n"
    "so), any other dtype is an error; --input .npy files stay '<f4' (NumPy has\n"
    "no bf16) and are rounded; random data is drawn in f32 and rounded. --output\n"
    "writes bf16 results widened to '<f4' (exact). --check compares with the tp-1\n"
    "build of the same bf16 block, tolerance 2e-2 (the split rounds partial sums\n"
    "the unsplit block never rounds). A split bf16 block has bf16 balance hooks\n"
    "(every policy, selection and imputation; its units migrate as bf16). An f32\n"
    "block given BF16 weights widens them (exact, with a note).\n",
    "\n"
    "Timing. Iterations are numbered from 0, warm-up ones first (so --slow and\n"
    "--fault iterations, the table and the trace use the same numbers). In each\n"
    "iteration the ranks meet at a barrier, then each calls the block and takes\n"
    "the balancing step (exchange of timings, a new plan, migration transfers);\n"
    "the iteration's time runs from the barrier to the last rank's end of that\n"
    "step (wall clock, CLOCK_MONOTONIC). A rank's compute time is its own call's\n"
    "time on its device's clock (htp_ctx_mark before and after the call, then\n"
    "htp_ctx_elapsed: CLOCK_MONOTONIC on the CPU, CUDA events on the rank's\n"
    "stream on a GPU) minus the time it spent in collectives (htp_ctx_comm_seconds:\n"
    "waiting for peers in the block's all-reduces is not its work), times F for a\n"
    "--slow rank. With balance hooks the planner is fed the rank's time in the\n"
    "hooks instead (the work it can move: layer norms and residuals do not shrink\n"
    "when units are shed).\n"
    "GFLOP/s counts the matrix products of the WHOLE block: the signature's flops\n"
    "(one rank's share after the split) times tp, over the iteration time (at the\n"
    "median in the summary).\n",
    "\n"
    "Detection. After every iteration the ranks all-gather their compute times into\n"
    "the runtime's planner (EWMA, threshold 0.90 of the fastest to become a\n"
    "straggler, 0.95 to recover, 3 iterations of hysteresis: runtime/htp.h;\n"
    "--ewma-alpha and --hysteresis set the first and the last). The\n"
    "table names the ranks it detected as stragglers.\n",
    "\n"
    "Balancing. A block split with --tp > 1 calls the runtime's balance hooks and its\n"
    "signature has a 'balance' record: per rank, its layers' attention heads and MLP\n"
    "units (groups of fc1/fc2 neurons) and their FLOPs. Each rank then gets an\n"
    "htp_balancer with that config (--policy, --impute, --select: random unit\n"
    "selection seeded with --seed, or importance); its end of each iteration runs\n"
    "detection, the plan (the same on every rank), the migration of handed-off\n"
    "units' weights (once per plan change) and the trace.\n"
    "The table shows the plan each iteration ran under (version; ranks that resize,\n"
    "migrate or help, with gamma) and the last plan's units; --check fails above\n"
    "tolerance for none and migrate only (resize and semi prune: the error is\n"
    "reported, marked approximate). A block without the record (tp 1, or compiled\n"
    "without hooks) has no units to balance: only --policy none runs, with a\n"
    "planner of one layer and one unit per kind, for detection.\n",
    "\n"
    "Threads. On the local backend each of the tp ranks gets max(1, cores / tp)\n"
    "threads for its kernels (under mpirun, cores / the ranks on this node), unless\n"
    "OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS, BLIS_NUM_THREADS or OMP_NUM_THREADS\n"
    "holds a count (the first that does); the table and the JSON report\n"
    "(blas_threads) say which.\n",
    "\n"
    "Limits. Before anything is allocated, htp-run refuses a block whose signature\n"
    "is beyond runtime/htp_entry.h's limits (tp above 1024, dims outside\n"
    "1..2^31-1, more than 2^40 bytes per tensor or workspace) or whose buffers on\n"
    "all ranks, with --check's unsplit copy, exceed this machine's memory (with\n"
    "--device cuda only what stays on the host is counted there, and each rank\n"
    "checks its GPU's free memory for its buffers before allocating them, with\n"
    "what its kernels may keep of their own: a bf16 linear's f32 sums, the\n"
    "every-head attention scratch, staged lists, the bound the compiler writes in\n"
    "the signature as kernel_memory_bytes; and with balance hooks what the\n"
    "balancer may keep: compact shards and migrated units at every unit of a\n"
    "layer, balancer_memory_bytes. After the run each rank's kernels and balancer\n"
    "are held to those bounds (the table and the JSON report give them beside\n"
    "what was held); a block compiled before a bound existed is run with that\n"
    "memory uncounted, and says so).\n",
    "\n"
    "Memory. Each rank's arguments are sliced on the host and uploaded once, before\n"
    "the first iteration, into buffers from the runtime (htp_mem_alloc: host memory\n"
    "on the CPU, device memory with --device cuda), beside its results and its\n"
    "workspace; the block runs on those, and the results are copied back after the\n"
    "last iteration for --output and --check. The CPU takes the same path.\n",
    "\n"
    "GPUs (--device cuda). Run on one H200 (scripts/gpu-check.sh, bench/RESULTS.md):\n"
    "blocks and training with the local backend, tp 1 and tp 4 on one GPU with\n"
    "--sms; --backend nccl across several GPUs has not run. The flow: compile the\n"
    "block where MLIR is (htp-compile block.mlir --tp N -o block.so), carry\n"
    "block.so to the GPU machine, build the MLIR-free executor there (cmake\n"
    "-DHTP_ENABLE_MLIR=OFF -DHTP_ENABLE_CUDA=ON) and run htp-run block.so --device\n"
    "cuda (scripts/gpu-bundle.sh prepares all of it here). Ranks of the\n"
    "local backend are threads sharing GPU 0, each with its stream, the all-reduce\n"
    "summing on the device; --sms R:COUNT gives rank R a partition of the SMs. For\n"
    "several GPUs: mpirun -np N htp-run block.so --backend nccl --device cuda (one\n"
    "process per GPU). Without CUDA in the build, or without a GPU, --device cuda\n"
    "is an error (exit 1). CUDA kernel switches (other values are refused):\n"
    "HTP_CUDA_LINEAR_EPILOGUE=pass (a linear's bias in its own pass rather than\n"
    "cuBLASLt's epilogue; set to either value, each shape's plan is said on\n"
    "stderr), HTP_CUDA_ATTENTION=wmma (the bf16 attention on WMMA rather than\n"
    "mma.sync): the older paths, the defaults being cublaslt and mma; and, not yet\n"
    "run on a GPU: HTP_CUDA_ATTENTION=head (the mma.sync attention a block per\n"
    "image and head, up to 256 tokens and heads up to 64 wide),\n"
    "HTP_CUDA_LAYER_NORM=warp (a warp a row; default block);\n"
    "HTP_CUDA_GEMM=cutlass (bf16 linears with a bias, and with their GELU, as one\n"
    "CUTLASS Hopper GEMM with both in its epilogue, on compute capability 9.0;\n"
    "builds with CUTLASS's headers only (scripts/fetch-cutlass.sh); default cublas).\n"
    "\n"
    "Profiling with perf: HTP_JIT_PERF=1 has the JIT tell perf the compiled\n"
    "block's symbols (LLVM's perf listener: a dump per run under\n"
    "$JITDUMPDIR/.debug/jit, else $TMPDIR or /tmp, so off by default; none, and no\n"
    "word, where that directory cannot be written).\n",
    "\n"
    "Training. htp-run --train runs a module compiled from examples/gen_vit.py\n"
    "--model (compiled with htp-grad: @vit_loss_grad returns the loss, the logits and\n"
    "one gradient per parameter, each rank's local shard). The gradient entry is the\n"
    "one whose results have role grad (--entry names it otherwise); the eval entry is\n"
    "its name without _grad (else the gradient entry evaluates too). The batch B is\n"
    "the entry's images dim 0: images [B, 1, 28, 28] normalised with mean 0.2860 and\n"
    "std 0.3530, targets one-hot [B, 10]; the training set is shuffled every epoch\n"
    "from (--seed, epoch) and cut into whole batches; the test set runs in batches\n"
    "of B, the last padded with zeros that are not scored (test loss and accuracy\n"
    "come from the logits). Every step each rank takes the same batch, calls the\n"
    "gradient entry and updates its parameter shards in place with the kernel\n"
    "table's optimizer on its device. Progress on stderr (a bar on a terminal), one\n"
    "line per epoch on stdout: loss, train acc, test loss, test acc, time.\n",
    "\n"
    "exit status: 0 success, 1 error (a failed rank, a --check above tolerance, a\n"
    "file that cannot be read or written), 2 bad command line (an unknown or\n"
    "repeated flag, a bad value, flags that cannot go together, an output that\n"
    "names an input or another output).\n",
};

void htp_run_print_help(FILE *stream) {
  for (size_t i = 0; i < sizeof HELP / sizeof *HELP; i++)
    fputs(HELP[i], stream);
}

/* The flags. Each has an id (getopt_long's val) and one bit in a "seen" mask,
 * so a single-valued flag given twice is refused by name. */
enum flag_id {
  FLAG_ENTRY = 256, FLAG_ITERS, FLAG_WARMUP, FLAG_SEED, FLAG_WEIGHTS, FLAG_INPUT, FLAG_OUTPUT,
  FLAG_REPORT, FLAG_TP, FLAG_BACKEND, FLAG_DEVICE, FLAG_POLICY, FLAG_IMPUTE, FLAG_SELECT,
  FLAG_SLOW, FLAG_FAULT, FLAG_SMS, FLAG_SHARES, FLAG_SPARE, FLAG_TIMEOUT, FLAG_TRACE, FLAG_CHECK,
  FLAG_HELP, FLAG_EWMA_ALPHA, FLAG_HYSTERESIS, FLAG_SAME_MAX_AGE, FLAG_REPARTITION, FLAG_ELASTIC,
  FLAG_STANDBY,
  /* --train and its flags */
  FLAG_TRAIN, FLAG_DATA, FLAG_EPOCHS, FLAG_OPTIMIZER, FLAG_LR, FLAG_MOMENTUM, FLAG_WEIGHT_DECAY,
  FLAG_SCHEDULE, FLAG_LIMIT_TRAIN, FLAG_LIMIT_TEST, FLAG_PARAMS, FLAG_CHECKPOINT, FLAG_RESUME,
  FLAG_METRICS, FLAG_AUGMENT, FLAG_LABEL_SMOOTHING, FLAG_CLOCK, FLAG_RANDOM_ERASE,
  FLAG_SKIP_NONFINITE, FLAG_PROFILE, FLAG_MATMUL_PRECISION
};
_Static_assert(FLAG_MATMUL_PRECISION - FLAG_ENTRY < 64, "the seen mask has one bit a flag");

/* htp-run's own choices (not runtime enums): the report, backend, device. */
static const char *const report_names[] = {"table", "json", NULL};
static const char *const backend_names[] = {"local", "mpi", "nccl", NULL};
static const char *const device_names[] = {"cpu", "cuda", "checked", NULL};
/* In htp_matmul_precision's order. */
static const char *const precision_names[] = {"f32", "tf32", "bf16", NULL};
_Static_assert(HTP_MATMUL_F32 == 0 && HTP_MATMUL_TF32 == 1 && HTP_MATMUL_BF16 == 2,
               "precision_names follows htp_matmul_precision");

const char *htp_run_matmul_precision_name(int precision) {
  return precision >= 0 && precision <= HTP_MATMUL_BF16 ? precision_names[precision] : "?";
}
static const char *const optimizer_names[] = {"adamw", "sgd", NULL};
static const char *const schedule_names[] = {"cosine", "constant", NULL};
static const char *const clock_names[] = {"wall", "cpu", "units", NULL}; /* htp_train_clock's order */
/* In htp_train_augment's order. */
static const char *const augment_names[] = {"none", "flip", "flip-shift", NULL};

const char *htp_run_augment_name(htp_train_augment augment) {
  return augment >= HTP_AUGMENT_NONE && augment <= HTP_AUGMENT_FLIP_SHIFT ? augment_names[augment]
                                                                          : "?";
}

const char *htp_run_optimizer_name(htp_train_optimizer optimizer) {
  return optimizer == HTP_TRAIN_SGD ? "sgd" : "adamw";
}

const char *htp_run_clock_name(htp_train_clock clock) {
  return clock >= HTP_TRAIN_CLOCK_WALL && clock <= HTP_TRAIN_CLOCK_UNITS ? clock_names[clock] : "?";
}

static int one_of(const char *flag, const char *value, const char *const *choices, char *err,
                  size_t err_size) {
  for (const char *const *choice = choices; *choice; choice++)
    if (strcmp(value, *choice) == 0)
      return 0;
  char list[128] = "";
  for (const char *const *choice = choices; *choice; choice++) {
    strncat(list, *choice, sizeof list - strlen(list) - 1);
    if (choice[1])
      strncat(list, "|", sizeof list - strlen(list) - 1);
  }
  return htp_set_error(err, err_size, "--%s expects %s, got '%s'", flag, list, value);
}

/* "none|resize|..." from a runtime name table: names of 0, 1, ... until the
 * table answers "?", so the runtime stays the one list of the names. */
typedef const char *(*enum_name_fn)(int value);
static void enum_names(enum_name_fn name_of, char *list, size_t size) {
  list[0] = '\0';
  for (int value = 0; strcmp(name_of(value), "?") != 0; value++) {
    if (value)
      strncat(list, "|", size - strlen(list) - 1);
    strncat(list, name_of(value), size - strlen(list) - 1);
  }
}
static const char *policy_name_of(int value) { return htp_policy_name((htp_policy)value); }
static const char *impute_name_of(int value) { return htp_impute_name((htp_impute)value); }
static const char *select_name_of(int value) { return htp_select_name((htp_select)value); }

static int bad_enum(const char *flag, enum_name_fn name_of, const char *value, char *err,
                    size_t err_size) {
  char list[128];
  enum_names(name_of, list, sizeof list);
  return htp_set_error(err, err_size, "--%s expects %s, got '%s'", flag, list, value);
}

/* A decimal integer in [min, max]: no blanks, no trailing text, no overflow. */
static int parse_long(const char *flag, const char *text, long min, long max, long *out, char *err,
                      size_t err_size) {
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  int malformed = end == text || *end != '\0' || isspace((unsigned char)text[0]);
  if (malformed || (errno == ERANGE && value == LONG_MIN) || (!errno && value < min))
    return htp_set_error(err, err_size, "--%s expects an integer >= %ld, got '%s'", flag, min,
                         text);
  if (errno || value > max)
    return htp_set_error(err, err_size, "--%s expects an integer <= %ld, got '%s'", flag, max,
                         text);
  *out = value;
  return 0;
}

/* strtod for the numbers of flags: plain decimal only ([-]digits[.digits]
 * [e[+-]digits]), as the integer flags; strtod alone also took " 3", "+3",
 * "0x10", "inf" and "nan". *end is where the number stops (text: none);
 * errno as strtod leaves it. */
static double decimal_number(const char *text, char **end) {
  const char *p = text + (*text == '-');
  const char *digits = p;
  while (isdigit((unsigned char)*p))
    p++;
  const int whole = p > digits;
  if (*p == '.') {
    const char *fraction = ++p;
    while (isdigit((unsigned char)*p))
      p++;
    if (!whole && p == fraction)
      p = digits;
  }
  if (p == digits) {
    *end = (char *)text;
    return 0.0;
  }
  if (*p == 'e' || *p == 'E') {
    const char *q = p + 1 + (p[1] == '+' || p[1] == '-');
    if (isdigit((unsigned char)*q)) {
      while (isdigit((unsigned char)*q))
        q++;
      p = q;
    }
  }
  char *parsed;
  errno = 0;
  double value = strtod(text, &parsed);
  *end = parsed == p ? parsed : (char *)text; /* the same span, or none */
  return value;
}

/* A finite decimal number in [min, max] (max_open: below max); no blanks
 * or trailing text. */
static int parse_double(const char *flag, const char *text, double min, double max,
                        int max_open, double *out, char *err, size_t err_size) {
  char *end;
  double value = decimal_number(text, &end);
  /* Underflow (1e-320: subnormal or zero) is no error: strtod's value stands. */
  if (errno == ERANGE && end != text && isfinite(value) && fabs(value) < 1.0)
    errno = 0;
  if (end == text || *end != '\0' || errno ||
      !isfinite(value) || value < min || value > max || (max_open && value == max))
    return htp_set_error(err, err_size, "--%s expects a number in [%g, %g%c, got '%s'", flag,
                         min, max, max_open ? ')' : ']', text);
  *out = value;
  return 0;
}

/* A non-negative int at *text, advancing it; no sign, no overflow. */
static int take_count(const char **text, long max, long *out) {
  const char *p = *text;
  long value = 0;
  if (*p < '0' || *p > '9')
    return 1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (value > (max - (*p - '0')) / 10)
      return 1;
    value = value * 10 + (*p - '0');
  }
  *text = p;
  *out = value;
  return 0;
}

/* "R:F[@K]". */
static int parse_slow(const char *value, htp_run_slow *slow, char *err, size_t err_size) {
  const char *p = value;
  long rank, from = 0;
  char *end;
  if (take_count(&p, 1 << 20, &rank) || *p != ':')
    goto bad;
  double factor = decimal_number(p + 1, &end);
  if (errno || end == p + 1 || !(factor >= 1.0) || factor > 1e6)
    goto bad;
  p = end;
  if (*p == '@') {
    p++;
    if (take_count(&p, 1L << 40, &from))
      goto bad;
  }
  if (*p != '\0')
    goto bad;
  slow->rank = (int)rank;
  slow->factor = factor;
  slow->from_iteration = from;
  return 0;
bad:
  return htp_set_error(err, err_size, "--slow expects RANK:FACTOR[@ITERATION] with FACTOR in "
                       "[1, 1e6], e.g. 1:3 or 2:1.5@10, got '%s'", value);
}

/* "R:COUNT", COUNT >= 1; a rank named by an earlier --sms is refused (its
 * partition would be ambiguous). */
static int parse_sms(const char *value, htp_run_options *options, char *err, size_t err_size) {
  const char *p = value;
  long rank, count;
  if (take_count(&p, 1 << 20, &rank) || *p++ != ':' ||
      take_count(&p, HTP_RUN_MAX_SM_COUNT, &count) || *p != '\0' || count < 1)
    return htp_set_error(err, err_size, "--sms expects RANK:COUNT with COUNT in [1, %d] (SMs "
                         "of the GPU for that rank), e.g. 3:32, got '%s'", HTP_RUN_MAX_SM_COUNT,
                         value);
  for (int i = 0; i < options->num_sms; i++)
    if (options->sms[i].rank == rank)
      return htp_set_error(err, err_size, "--sms %s: rank %ld was already given %d SMs (one "
                           "--sms per rank)", value, rank, options->sms[i].count);
  if (options->num_sms == HTP_RUN_MAX_SMS)
    return htp_set_error(err, err_size, "more than %d --sms flags", HTP_RUN_MAX_SMS);
  options->sms[options->num_sms].rank = (int)rank;
  options->sms[options->num_sms].count = (int)count;
  options->num_sms++;
  return 0;
}

/* "S,S,...": one share per rank, each in [1, HTP_ENTRY_MAX_SHARD_UNITS]. */
static int parse_shares(const char *value, htp_run_options *options, char *err,
                        size_t err_size) {
  const char *p = value;
  options->num_shares = 0;
  do {
    long share;
    if (options->num_shares == HTP_ENTRY_MAX_TP ||
        take_count(&p, HTP_ENTRY_MAX_SHARD_UNITS, &share) || share < 1)
      return htp_set_error(err, err_size, "--shares expects one share per rank, each in [1, "
                           "%lld], comma-separated (at most %d), e.g. 3,3,2,1, got '%s'",
                           (long long)HTP_ENTRY_MAX_SHARD_UNITS, HTP_ENTRY_MAX_TP, value);
    options->shares[options->num_shares++] = share;
  } while (*p++ == ',');
  if (p[-1] != '\0')
    return htp_set_error(err, err_size, "--shares expects one share per rank, comma-separated, "
                         "e.g. 3,3,2,1, got '%s'", value);
  return 0;
}

/* "hang:R@K", "die:R@K", "delay[=S]:R@K". */
static int parse_fault(const char *value, htp_run_fault *fault, char *err, size_t err_size) {
  const char *p = value;
  long rank, iteration;
  memset(fault, 0, sizeof *fault);
  if (strncmp(p, "hang:", 5) == 0) {
    fault->kind = HTP_RUN_FAULT_HANG;
    p += 5;
  } else if (strncmp(p, "die:", 4) == 0) {
    fault->kind = HTP_RUN_FAULT_DIE;
    p += 4;
  } else if (strncmp(p, "rejoin:", 7) == 0) {
    fault->kind = HTP_RUN_FAULT_REJOIN;
    p += 7;
  } else if (strncmp(p, "delay", 5) == 0) {
    fault->kind = HTP_RUN_FAULT_DELAY;
    fault->seconds = 1.0;
    p += 5;
    if (*p == '=') {
      char *end;
      fault->seconds = decimal_number(p + 1, &end);
      if (errno || end == p + 1 || !(fault->seconds > 0) || fault->seconds > 1e7)
        goto bad;
      p = end;
    }
    if (*p++ != ':')
      goto bad;
  } else {
    goto bad;
  }
  if (take_count(&p, 1 << 20, &rank) || *p++ != '@' || take_count(&p, 1L << 40, &iteration) ||
      *p != '\0')
    goto bad;
  fault->rank = (int)rank;
  fault->iteration = iteration;
  return 0;
bad:
  return htp_set_error(err, err_size, "--fault expects hang:RANK@ITERATION, die:RANK@ITERATION, "
                       "rejoin:RANK@ITERATION or delay[=SECONDS]:RANK@ITERATION, got '%s'", value);
}

/* A file name: anything but empty. */
static int take_path(const char *flag, const char *value, const char **out, char *err,
                     size_t err_size) {
  if (!*value)
    return htp_set_error(err, err_size, "--%s needs a file name", flag);
  *out = value;
  return 0;
}

/* Applies one flag and its value (NULL for a switch). */
/* ----- The flags that need more than the table's kinds ---------------- */

static int parse_entry(const char *value, htp_run_options *options, char *err, size_t err_size) {
  if (!*value)
    return htp_set_error(err, err_size, "--entry needs a function name");
  options->entry = value;
  return 0;
}

static int parse_seed(const char *value, htp_run_options *options, char *err, size_t err_size) {
  char *end;
  errno = 0;
  unsigned long long seed = strtoull(value, &end, 10);
  /* strtoull would take blanks and a '-' (negating): digits only. */
  if (errno || end == value || *end != '\0' || !isdigit((unsigned char)value[0]))
    return htp_set_error(err, err_size, "--seed expects a non-negative integer below 2^64, got "
                         "'%s'", value);
  options->seed = (uint64_t)seed;
  return 0;
}

static int add_path(const char *flag, const char *value, const char **paths, int *count,
                    char *err, size_t err_size) {
  if (*count == HTP_RUN_MAX_FILES)
    return htp_set_error(err, err_size, "more than %d --%s flags", HTP_RUN_MAX_FILES, flag);
  if (take_path(flag, value, &paths[*count], err, err_size))
    return 1;
  (*count)++;
  return 0;
}

static int parse_input(const char *value, htp_run_options *options, char *err, size_t err_size) {
  return add_path("input", value, options->inputs, &options->num_inputs, err, err_size);
}

static int parse_output(const char *value, htp_run_options *options, char *err, size_t err_size) {
  return add_path("output", value, options->outputs, &options->num_outputs, err, err_size);
}

static int parse_policy(const char *value, htp_run_options *options, char *err, size_t err_size) {
  return htp_policy_parse(value, &options->policy) != HTP_OK
             ? bad_enum("policy", policy_name_of, value, err, err_size)
             : 0;
}

static int parse_impute(const char *value, htp_run_options *options, char *err, size_t err_size) {
  options->impute_given = 1;
  return htp_impute_parse(value, &options->impute) != HTP_OK
             ? bad_enum("impute", impute_name_of, value, err, err_size)
             : 0;
}

static int parse_select(const char *value, htp_run_options *options, char *err, size_t err_size) {
  options->select_given = 1;
  return htp_select_parse(value, &options->selection) != HTP_OK
             ? bad_enum("select", select_name_of, value, err, err_size)
             : 0;
}

static int add_slow(const char *value, htp_run_options *options, char *err, size_t err_size) {
  if (options->num_slows == HTP_RUN_MAX_INJECTIONS)
    return htp_set_error(err, err_size, "more than %d --slow flags", HTP_RUN_MAX_INJECTIONS);
  if (parse_slow(value, &options->slows[options->num_slows], err, err_size))
    return 1;
  options->num_slows++;
  options->slow = value;
  return 0;
}

static int add_fault(const char *value, htp_run_options *options, char *err, size_t err_size) {
  if (options->num_faults == HTP_RUN_MAX_INJECTIONS)
    return htp_set_error(err, err_size, "more than %d --fault flags", HTP_RUN_MAX_INJECTIONS);
  if (parse_fault(value, &options->faults[options->num_faults], err, err_size))
    return 1;
  options->num_faults++;
  return 0;
}

static int parse_timeout(const char *value, htp_run_options *options, char *err,
                         size_t err_size) {
  char *end;
  double seconds = decimal_number(value, &end);
  if (errno || end == value || *end != '\0' || !(seconds > 0) || seconds > 1e7)
    return htp_set_error(err, err_size, "--timeout expects seconds in (0, 1e7], got '%s'", value);
  options->timeout_s = seconds;
  return 0;
}

/* ----- The table --------------------------------------------------------- */

/* How a flag's value is read and where it goes (offset into
 * htp_run_options). */
typedef enum flag_kind {
  KIND_SWITCH, /* no value: the int at offset becomes 1 */
  KIND_LONG,   /* a long in [min, max] */
  KIND_DOUBLE, /* a double in [min, max], "(min" with min_open, "max)" with max_open */
  KIND_PATH,   /* a file path (take_path), const char * */
  KIND_CHOICE, /* one of choices: its index, as the int-sized enum at offset */
  KIND_WORD,   /* one of choices: the word itself, const char * */
  KIND_PARSE,  /* parse() */
} flag_kind;

enum { REPEATABLE = 1, TRAIN_ONLY = 2, RUN_ONLY = 4 };

typedef struct flag_spec {
  const char *name;
  int id;
  flag_kind kind;
  size_t offset;
  double min, max;
  int min_open, max_open;
  const char *const *choices;
  size_t given; /* non-zero: the offset of an int set to 1 when the flag is given */
  int (*parse)(const char *value, htp_run_options *options, char *err, size_t err_size);
  unsigned traits;
} flag_spec;

#define AT(field) offsetof(htp_run_options, field)
/* Rows by kind: every field given, in flag_spec's order. */
#define SWITCH(name, id, field, traits) \
  {name, id, KIND_SWITCH, AT(field), 0, 0, 0, 0, NULL, 0, NULL, traits}
#define LONG(name, id, field, min, max, given, traits) \
  {name, id, KIND_LONG, AT(field), min, max, 0, 0, NULL, given, NULL, traits}
#define DOUBLE(name, id, field, min, max, min_open, max_open, given, traits) \
  {name, id, KIND_DOUBLE, AT(field), min, max, min_open, max_open, NULL, given, NULL, traits}
#define PATH(name, id, field, traits) \
  {name, id, KIND_PATH, AT(field), 0, 0, 0, 0, NULL, 0, NULL, traits}
#define CHOICE(name, id, kind, field, choices, traits) \
  {name, id, kind, AT(field), 0, 0, 0, 0, choices, 0, NULL, traits}
#define PARSE(name, id, parse, traits) {name, id, KIND_PARSE, 0, 0, 0, 0, 0, NULL, 0, parse, traits}
static const flag_spec FLAGS[] = {
    PARSE("entry", FLAG_ENTRY, parse_entry, 0),
    LONG("iters", FLAG_ITERS, iters, 1, HTP_RUN_MAX_ITERS, 0, RUN_ONLY),
    LONG("warmup", FLAG_WARMUP, warmup, 0, HTP_RUN_MAX_ITERS, 0, RUN_ONLY),
    PARSE("seed", FLAG_SEED, parse_seed, 0),
    PATH("weights", FLAG_WEIGHTS, weights, RUN_ONLY),
    PARSE("input", FLAG_INPUT, parse_input, REPEATABLE | RUN_ONLY),
    PARSE("output", FLAG_OUTPUT, parse_output, REPEATABLE | RUN_ONLY),
    CHOICE("report", FLAG_REPORT, KIND_CHOICE, report, report_names, RUN_ONLY),
    LONG("tp", FLAG_TP, tp, 1, HTP_ENTRY_MAX_TP, AT(tp_given), 0),
    CHOICE("backend", FLAG_BACKEND, KIND_WORD, backend, backend_names, 0),
    CHOICE("device", FLAG_DEVICE, KIND_WORD, device, device_names, 0),
    CHOICE("matmul-precision", FLAG_MATMUL_PRECISION, KIND_CHOICE, matmul_precision,
           precision_names, 0),
    PARSE("policy", FLAG_POLICY, parse_policy, 0),
    PARSE("impute", FLAG_IMPUTE, parse_impute, 0),
    PARSE("select", FLAG_SELECT, parse_select, 0),
    DOUBLE("ewma-alpha", FLAG_EWMA_ALPHA, ewma_alpha, 0, 1, 1, 0, 0, 0),
    LONG("hysteresis", FLAG_HYSTERESIS, hysteresis, 1, 1000000, 0, 0),
    LONG("same-max-age", FLAG_SAME_MAX_AGE, same_max_age, 0, 1000000000, 0, 0),
    DOUBLE("repartition", FLAG_REPARTITION, repartition, 0, 1e12, 0, 0, AT(repartition_given),
           0),
    PARSE("slow", FLAG_SLOW, add_slow, REPEATABLE),
    PARSE("fault", FLAG_FAULT, add_fault, REPEATABLE),
    PARSE("sms", FLAG_SMS, parse_sms, REPEATABLE),
    PARSE("shares", FLAG_SHARES, parse_shares, 0),
    LONG("spare", FLAG_SPARE, spare, 0, 1000, 0, 0),
    PARSE("timeout", FLAG_TIMEOUT, parse_timeout, 0),
    PATH("trace", FLAG_TRACE, trace, 0),
    SWITCH("check", FLAG_CHECK, check, REPEATABLE | RUN_ONLY),
    SWITCH("profile", FLAG_PROFILE, profile, REPEATABLE),
    SWITCH("help", FLAG_HELP, help, REPEATABLE),
    SWITCH("train", FLAG_TRAIN, train.enabled, REPEATABLE),
    PATH("data", FLAG_DATA, train.data, TRAIN_ONLY),
    LONG("epochs", FLAG_EPOCHS, train.epochs, 1, HTP_TRAIN_MAX_EPOCHS, 0, TRAIN_ONLY),
    CHOICE("optimizer", FLAG_OPTIMIZER, KIND_CHOICE, train.optimizer, optimizer_names, TRAIN_ONLY),
    /* The kernels take the rate as a float: 1e-50 would train at 0. */
    DOUBLE("lr", FLAG_LR, train.lr, 1e-30, 10, 0, 0, AT(train.lr_given), TRAIN_ONLY),
    DOUBLE("momentum", FLAG_MOMENTUM, train.momentum, 0, 1, 0, 1, AT(train.momentum_given),
           TRAIN_ONLY),
    DOUBLE("weight-decay", FLAG_WEIGHT_DECAY, train.weight_decay, 0, 10, 0, 0,
           AT(train.weight_decay_given), TRAIN_ONLY),
    CHOICE("schedule", FLAG_SCHEDULE, KIND_CHOICE, train.schedule, schedule_names, TRAIN_ONLY),
    CHOICE("augment", FLAG_AUGMENT, KIND_CHOICE, train.augment, augment_names, TRAIN_ONLY),
    DOUBLE("label-smoothing", FLAG_LABEL_SMOOTHING, train.label_smoothing, 0, 1, 0, 1, 0,
           TRAIN_ONLY),
    DOUBLE("random-erase", FLAG_RANDOM_ERASE, train.random_erase, 0, 1, 0, 0, 0, TRAIN_ONLY),
    CHOICE("clock", FLAG_CLOCK, KIND_CHOICE, train.clock, clock_names, TRAIN_ONLY),
    LONG("limit-train", FLAG_LIMIT_TRAIN, train.limit_train, 1, INT32_MAX, 0, TRAIN_ONLY),
    LONG("limit-test", FLAG_LIMIT_TEST, train.limit_test, 1, INT32_MAX, 0, TRAIN_ONLY),
    PATH("params", FLAG_PARAMS, train.params, TRAIN_ONLY),
    PATH("checkpoint", FLAG_CHECKPOINT, train.checkpoint, TRAIN_ONLY),
    PATH("resume", FLAG_RESUME, train.resume, TRAIN_ONLY),
    PATH("metrics", FLAG_METRICS, train.metrics, TRAIN_ONLY),
    SWITCH("skip-nonfinite", FLAG_SKIP_NONFINITE, train.skip_nonfinite, REPEATABLE | TRAIN_ONLY),
    LONG("elastic", FLAG_ELASTIC, train.elastic, 0, 1000000000, AT(train.elastic_given),
         TRAIN_ONLY),
    LONG("standby", FLAG_STANDBY, train.standby, 1, HTP_ENTRY_MAX_TP, 0, TRAIN_ONLY),
};
#undef SWITCH
#undef LONG
#undef DOUBLE
#undef PATH
#undef CHOICE
#undef PARSE
#undef AT
enum { NUM_FLAGS = sizeof FLAGS / sizeof *FLAGS };
_Static_assert(NUM_FLAGS == FLAG_MATMUL_PRECISION - FLAG_ENTRY + 1, "one row per flag id");
/* KIND_CHOICE writes an int: the enums it fills are int-sized. */
_Static_assert(sizeof(htp_report_kind) == sizeof(int) && sizeof(htp_train_clock) == sizeof(int),
               "choice enums are ints");

static const flag_spec *flag_of(int id) {
  if (id == 'h')
    id = FLAG_HELP;
  for (int i = 0; i < NUM_FLAGS; i++)
    if (FLAGS[i].id == id)
      return &FLAGS[i];
  return NULL;
}

static const char *flag_name(int id) {
  const flag_spec *spec = flag_of(id);
  return spec ? spec->name : "?";
}

/* getopt_long's view of the table (built once: the table is constant). */
static const struct option *long_flags(void) {
  static struct option flags[NUM_FLAGS + 1];
  for (int i = 0; i < NUM_FLAGS; i++)
    flags[i] = (struct option){FLAGS[i].name,
                               FLAGS[i].kind == KIND_SWITCH ? no_argument : required_argument,
                               NULL, FLAGS[i].id};
  return flags;
}

static int apply_flag(const flag_spec *spec, const char *value, htp_run_options *options,
                      char *err, size_t err_size) {
  char *field = (char *)options + spec->offset;
  int failed = 0;
  switch (spec->kind) {
  case KIND_SWITCH:
    *(int *)field = 1;
    break;
  case KIND_LONG:
    failed = parse_long(spec->name, value, (long)spec->min, (long)spec->max, (long *)field, err,
                        err_size);
    break;
  case KIND_DOUBLE: {
    double number = 0;
    failed = parse_double(spec->name, value, spec->min, spec->max, spec->max_open, &number, err,
                          err_size);
    /* An open lower end: one message for every refusal. */
    if (spec->min_open && (failed || !(number > spec->min)))
      failed = htp_set_error(err, err_size, "--%s expects a number in (%g, %g], got '%s'",
                             spec->name, spec->min, spec->max, value);
    if (!failed)
      *(double *)field = number;
    break;
  }
  case KIND_PATH:
    failed = take_path(spec->name, value, (const char **)field, err, err_size);
    break;
  case KIND_CHOICE:
  case KIND_WORD:
    if ((failed = one_of(spec->name, value, spec->choices, err, err_size)))
      break;
    for (int i = 0; spec->choices[i]; i++)
      if (strcmp(value, spec->choices[i]) == 0) {
        if (spec->kind == KIND_CHOICE)
          *(int *)field = i;
        else
          *(const char **)field = spec->choices[i];
      }
    break;
  case KIND_PARSE:
    failed = spec->parse(value, options, err, err_size);
    break;
  }
  if (!failed && spec->given)
    *(int *)((char *)options + spec->given) = 1;
  return failed;
}

/* "--name" of a word "--name=value" (for the messages), in buffer. */
static const char *word_flag(const char *word, char *buffer, size_t size) {
  size_t length = strcspn(word, "=");
  if (length >= size)
    length = size - 1;
  memcpy(buffer, word, length);
  buffer[length] = '\0';
  return buffer;
}

/* An unknown long flag, or a prefix of several (getopt_long takes a prefix of
 * one): the error names those it could be. */
static int unknown_flag(const char *text, char *err, size_t err_size) {
  const char *name = strncmp(text, "--", 2) == 0 ? text + 2 : text;
  const size_t length = strlen(name);
  char matches[512] = "";
  size_t used = 0;
  int count = 0;
  for (int i = 0; i < NUM_FLAGS && length > 0; i++)
    if (strncmp(FLAGS[i].name, name, length) == 0 && used < sizeof matches) {
      used += (size_t)snprintf(matches + used, sizeof matches - used, "%s--%s",
                               count++ ? ", " : "", FLAGS[i].name);
    }
  if (count > 1)
    return htp_set_error(err, err_size, "ambiguous option '%s': %s%s (give more of the name)",
                         text, matches, used >= sizeof matches ? "..." : "");
  return htp_set_error(err, err_size, "unknown option '%s'", text);
}

/* The defaults, before any flag: HTP_DEVICE sets the device's (CI reruns
 * the e2e suite on the checked device with it; --device still wins).
 * Non-zero with err. */
static int set_defaults(htp_run_options *options, char *err, size_t err_size) {
  memset(options, 0, sizeof *options);
  options->iters = 10;
  options->warmup = 1;
  options->tp = 1;
  options->backend = "local";
  options->device = "cpu";
  const char *device_default = getenv("HTP_DEVICE");
  if (device_default && *device_default) {
    if (one_of("device (HTP_DEVICE)", device_default, device_names, err, err_size))
      return 1;
    options->device = device_default;
  }
  options->policy = HTP_POLICY_NONE;
  options->impute = HTP_IMPUTE_ZERO;
  options->same_max_age = -1; /* by --train, in check_combinations */
  options->selection = HTP_SELECT_RANDOM;
  const htp_planner_config defaults = HTP_PLANNER_CONFIG_INITIALIZER;
  options->ewma_alpha = defaults.ewma_alpha;
  options->hysteresis = defaults.hysteresis_iters;
  options->report = HTP_REPORT_TABLE;
  options->timeout_s = 60.0;
  options->train.data = HTP_TRAIN_DEFAULT_DATA;
  options->train.epochs = 5;
  options->train.optimizer = HTP_TRAIN_ADAMW;
  options->train.momentum = 0.9;
  options->train.schedule = HTP_TRAIN_COSINE;
  return 0;
}

/* The flags through getopt_long, each applied by its table row; the file
 * where it stands. *first_train_only: the first flag of --train seen.
 * Non-zero with err. */
static int read_flags(int argc, char **argv, htp_run_options *options, int *first_train_only,
                      char *err, size_t err_size) {
  /* getopt_long keeps its state in globals: optind = 0 restarts it (glibc),
   * opterr = 0 keeps its own messages off stderr (ours say more). In the
   * option string, '-' hands over the file where it stands (as option 1)
   * instead of permuting argv, whatever POSIXLY_CORRECT says, and ':' makes
   * a missing value ':' rather than '?'. */
  optind = 0;
  opterr = 0;
  uint64_t seen = 0;
  char word[64];
  for (;;) {
    int id = getopt_long(argc, argv, "-:h", long_flags(), NULL);
    if (id == -1)
      return 0;
    if (id == 1) {
      if (options->path)
        return htp_set_error(err, err_size, "more than one file given ('%s' and '%s')",
                             options->path, optarg);
      options->path = optarg;
      continue;
    }
    if (id == '?') {
      if (optopt && optopt < FLAG_ENTRY)
        return htp_set_error(err, err_size, "unknown option '-%c'", optopt);
      /* An unknown or ambiguous long option ("--c" is --check or ...?). */
      const char *text = word_flag(argv[optind - 1], word, sizeof word);
      if (optopt)
        return htp_set_error(err, err_size, "option '%s' takes no value", text);
      return unknown_flag(text, err, err_size);
    }
    if (id == ':')
      return htp_set_error(err, err_size, "--%s needs a value", flag_name(optopt));
    const flag_spec *spec = flag_of(id);
    if (!spec)
      return htp_set_error(err, err_size, "internal error: flag %d has no row", id);
    uint64_t bit = UINT64_C(1) << (spec->id - FLAG_ENTRY);
    if ((seen & bit) && !(spec->traits & REPEATABLE))
      return htp_set_error(err, err_size, "--%s given more than once (it takes one value)",
                           spec->name);
    seen |= bit;
    if ((spec->traits & TRAIN_ONLY) && !*first_train_only)
      *first_train_only = spec->id;
    if ((spec->traits & RUN_ONLY) && !options->given_run_only) {
      options->given_run_only = 1;
      options->run_only_flag = spec->name;
    }
    if (apply_flag(spec, optarg, options, err, err_size))
      return 1;
  }
}

/* Flags that do not go together, and the defaults that depend on others
 * (--same-max-age on --train, lr and weight decay on the optimizer).
 * Non-zero with err. */
static int check_combinations(htp_run_options *options, int first_train_only, char *err,
                              size_t err_size) {
  htp_train_options *train = &options->train;
  if (first_train_only && !train->enabled && !options->help)
    return htp_set_error(err, err_size, "--%s is a flag of --train (add --train, or leave it "
                         "out)", flag_name(first_train_only));
  if (train->enabled && options->given_run_only && !options->help)
    return htp_set_error(err, err_size, "--%s is not used by --train (%s)",
                         options->run_only_flag,
                         strcmp(options->run_only_flag, "weights") == 0
                             ? "initial weights are --params FILE"
                             : "it trains over --epochs and writes --metrics and --checkpoint");
  if (!train->enabled &&
      (options->selection == HTP_SELECT_VARIATION ||
       options->selection == HTP_SELECT_DISPLACEMENT) && !options->help)
    return htp_set_error(err, err_size, "--select %s ranks units by how their weights "
                         "change in training: use it with --train",
                         htp_select_name(options->selection));
  /* The checked device computes on the rank's thread, as the CPU does. */
  if (train->enabled && train->clock != HTP_TRAIN_CLOCK_WALL && strcmp(options->device, "cpu") != 0 &&
      strcmp(options->device, "checked") != 0 && !options->help)
    return htp_set_error(err, err_size, "--clock %s times each rank thread's CPU work: with "
                         "--device %s the work is the device's (use --clock wall)",
                         htp_run_clock_name(train->clock), options->device);
  if (options->same_max_age >= 0 && options->impute != HTP_IMPUTE_SAME && !options->help)
    return htp_set_error(err, err_size, "--same-max-age bounds the values --impute same "
                         "reuses: add --impute same, or leave it out");
  if (options->same_max_age < 0) options->same_max_age = train->enabled ? 1 : 0;
  /* A timed run's iterations are 0 .. warm-up + iters - 1: a fault or a
   * slowdown from past them never happens, which is said (not refused: a
   * script may sweep --iters under one fault). */
  const long last = options->warmup + options->iters - 1;
  for (int i = 0; !train->enabled && !options->help && i < options->num_faults; i++)
    if (options->faults[i].iteration > last)
      fprintf(stderr, "htp-run: note: the --fault at iteration %ld never happens: the run's "
              "iterations are 0 to %ld (--warmup %ld, --iters %ld)\n",
              options->faults[i].iteration, last, options->warmup, options->iters);
  for (int i = 0; !train->enabled && !options->help && i < options->num_slows; i++)
    if (options->slows[i].from_iteration > last)
      fprintf(stderr, "htp-run: note: the --slow from iteration %ld never happens: the run's "
              "iterations are 0 to %ld (--warmup %ld, --iters %ld)\n",
              options->slows[i].from_iteration, last, options->warmup, options->iters);
  /* A rank that died stays dead until a rejoin: a second death before one
   * never happens. */
  for (int i = 0; !options->help && i < options->num_faults; i++) {
    const htp_run_fault *f = &options->faults[i];
    if (f->kind != HTP_RUN_FAULT_DIE)
      continue;
    for (int j = 0; j < options->num_faults; j++) {
      const htp_run_fault *first = &options->faults[j];
      if (j == i || first->kind != HTP_RUN_FAULT_DIE || first->rank != f->rank ||
          first->iteration > f->iteration || (first->iteration == f->iteration && j > i))
        continue;
      int back = 0;
      for (int k = 0; k < options->num_faults; k++)
        back |= options->faults[k].kind == HTP_RUN_FAULT_REJOIN &&
                options->faults[k].rank == f->rank &&
                options->faults[k].iteration > first->iteration &&
                options->faults[k].iteration <= f->iteration;
      if (!back) {
        fprintf(stderr, "htp-run: note: --fault die:%d@%ld never happens: rank %d dies at "
                "iteration %ld and no --fault rejoin brings it back before\n", f->rank,
                f->iteration, f->rank, first->iteration);
        break;
      }
    }
  }
  /* Flags that would do nothing: said, not ignored. */
  if (options->impute_given && options->policy != HTP_POLICY_RESIZE &&
      options->policy != HTP_POLICY_SEMI && !options->help)
    return htp_set_error(err, err_size, "--impute %s fills in the outputs of pruned units: only "
                         "--policy resize and semi prune (the policy is %s)",
                         htp_impute_name(options->impute), htp_policy_name(options->policy));
  if (options->select_given && options->policy == HTP_POLICY_NONE && !options->help)
    return htp_set_error(err, err_size, "--select %s picks the units a straggler sheds: only "
                         "--policy resize, migrate and semi shed units (the policy is none)",
                         htp_select_name(options->selection));
  if (options->repartition_given && options->policy != HTP_POLICY_MIGRATE &&
      options->policy != HTP_POLICY_SEMI && !options->help)
    return htp_set_error(err, err_size, "--repartition moves migrated units into the helpers' "
                         "slots: only --policy migrate and semi migrate (the policy is %s)",
                         htp_policy_name(options->policy));
  if (train->enabled && train->momentum_given && train->optimizer != HTP_TRAIN_SGD &&
      !options->help)
    return htp_set_error(err, err_size, "--momentum is SGD's (--optimizer sgd); AdamW's moments "
                         "have fixed betas (0.9, 0.999)");
  /* On by default on every device (on a GPU since it ran there: an H200,
   * tp 2 training, bench/RESULTS.md). */
  if (!options->repartition_given)
    options->repartition = 2.0;
  if (options->num_shares && !options->tp_given)
    options->tp = options->num_shares;
  if (options->num_shares && options->num_shares != options->tp && !options->help)
    return htp_set_error(err, err_size, "--shares gives %d shares but --tp is %ld: one share per "
                         "rank", options->num_shares, options->tp);
  if (train->enabled && train->params && train->resume)
    return htp_set_error(err, err_size, "--params and --resume both give the starting weights: "
                         "give one");
  /* Defaults that depend on the optimizer: AdamW's and SGD's usual ones. */
  if (!train->lr_given)
    train->lr = train->optimizer == HTP_TRAIN_SGD ? 0.05 : 1e-3;
  if (!train->weight_decay_given)
    train->weight_decay = train->optimizer == HTP_TRAIN_SGD ? 0.0 : 0.05;
  return 0;
}

int htp_run_parse_options(int argc, char **argv, htp_run_options *options, char *err,
                          size_t err_size) {
  int first_train_only = 0;
  if (set_defaults(options, err, err_size) ||
      read_flags(argc, argv, options, &first_train_only, err, err_size) ||
      check_combinations(options, first_train_only, err, err_size))
    return 1;
  /* After "--": the file, which may then start with '-'. */
  for (int i = optind; i < argc; i++) {
    if (options->path)
      return htp_set_error(err, err_size, "more than one file given ('%s' and '%s')",
                           options->path, argv[i]);
    options->path = argv[i];
  }
  if (!options->help && !options->path)
    return htp_set_error(err, err_size, "no input file (FILE.mlir or FILE.so)");
  return 0;
}

int htp_run_check_ranks(const htp_run_options *options, long tp, const char *source, char *err,
                        size_t err_size) {
  for (int i = 0; i < options->num_slows; i++) {
    const htp_run_slow *slow = &options->slows[i];
    if (slow->rank < tp)
      continue;
    char from[32] = "";
    if (slow->from_iteration)
      snprintf(from, sizeof from, "@%ld", slow->from_iteration);
    return htp_set_error(err, err_size, "--slow %d:%g%s: rank %d is not in [0, %ld) (%s %ld)",
                         slow->rank, slow->factor, from, slow->rank, tp, source, tp);
  }
  static const char *const kinds[] = {"delay", "hang", "die", "rejoin"};
  for (int i = 0; i < options->num_faults; i++) {
    const htp_run_fault *f = &options->faults[i];
    if (f->rank < tp)
      continue;
    char seconds[32] = "";
    if (f->kind == HTP_RUN_FAULT_DELAY)
      snprintf(seconds, sizeof seconds, "=%g", f->seconds);
    return htp_set_error(err, err_size, "--fault %s%s:%d@%ld: rank %d is not in [0, %ld) (%s "
                         "%ld)", (unsigned)f->kind < 4 ? kinds[f->kind] : "?", seconds, f->rank,
                         f->iteration, f->rank, tp, source, tp);
  }
  for (int i = 0; i < options->num_sms; i++)
    if (options->sms[i].rank >= tp)
      return htp_set_error(err, err_size, "--sms %d:%d: rank %d is not in [0, %ld) (%s %ld)",
                           options->sms[i].rank, options->sms[i].count, options->sms[i].rank,
                           tp, source, tp);
  return 0;
}

int htp_run_check_implemented(const htp_run_options *options, char *err, size_t err_size) {
  const int cuda = strcmp(options->device, "cuda") == 0;
  if (strcmp(options->backend, "nccl") == 0 && !cuda)
    return htp_set_error(err, err_size, "--backend nccl runs on GPUs: it needs --device cuda "
                         "(mpirun -np N htp-run FILE.so --backend nccl --device cuda); on the "
                         "CPU use --backend local or mpi");
  if (options->num_sms && !cuda && strcmp(options->device, "checked") != 0)
    return htp_set_error(err, err_size, "--sms partitions a GPU's SMs among the ranks: it needs "
                         "--device cuda (or checked, which counts them as an H200's)");
  if (options->num_sms && strcmp(options->backend, "local") != 0)
    return htp_set_error(err, err_size, "--sms partitions one GPU among the ranks of this "
                         "process: it needs --backend local (with --backend %s each rank has "
                         "a GPU of its own)", options->backend);
  if (options->tp_given && htp_run_check_ranks(options, options->tp, "--tp", err, err_size))
    return 1;
  /* The scores and the stored or averaged values are read and written by
   * the host's loops: on a device they are device memory (the balancer
   * refuses them there too, rank by rank). */
  if (strcmp(options->device, "cpu") != 0 &&
      (options->impute != HTP_IMPUTE_ZERO || options->selection != HTP_SELECT_RANDOM))
    return htp_set_error(err, err_size, "--device %s balances with --select random and --impute "
                         "zero only (asked: --select %s, --impute %s): importance, variation, "
                         "displacement and the same and average imputations run on the CPU",
                         options->device, htp_select_name(options->selection),
                         htp_impute_name(options->impute));
  if (options->profile && !options->train.enabled && options->iters > HTP_PROFILE_MAX_ITERATIONS)
    return htp_set_error(err, err_size, "--profile keeps every call's time of each timed "
                         "iteration: at most %d (--iters %ld)", HTP_PROFILE_MAX_ITERATIONS,
                         options->iters);
  if (options->trace && options->train.enabled && options->backend &&
      strcmp(options->backend, "mpi") == 0)
    return htp_set_error(err, err_size, "--train --trace: under mpirun (--backend mpi) the "
                         "trace is not written yet; trace a run of the local backend");
  if (options->profile && options->train.enabled && options->train.elastic_given)
    return htp_set_error(err, err_size, "--profile times one world's training steps: not with "
                         "--elastic, whose worlds come and go");
  if (options->train.standby && (!options->train.elastic_given || !options->backend ||
                                  strcmp(options->backend, "mpi") != 0))
    return htp_set_error(err, err_size, "--standby %ld: standby processes wait beside a run "
                         "of --train --elastic under mpirun (--backend mpi)",
                         options->train.standby);
  /* A rank comes back only to a run that went on without it. */
  for (int i = 0; i < options->num_faults; i++) {
    const htp_run_fault *back = &options->faults[i];
    if (back->kind != HTP_RUN_FAULT_REJOIN || options->help)
      continue;
    if (!options->train.enabled || !options->train.elastic_given)
      return htp_set_error(err, err_size, "--fault rejoin:%d@%ld brings a lost rank back to a "
                           "run that went on without it: use it with --train --elastic",
                           back->rank, back->iteration);
    int lost = 0; /* under --elastic a hang is a loss too */
    for (int j = 0; j < options->num_faults; j++)
      lost |= (options->faults[j].kind == HTP_RUN_FAULT_DIE ||
               options->faults[j].kind == HTP_RUN_FAULT_HANG) &&
              options->faults[j].rank == back->rank && options->faults[j].iteration < back->iteration;
    if (!lost)
      return htp_set_error(err, err_size, "--fault rejoin:%d@%ld: rank %d is not lost before "
                           "iteration %ld (give --fault die:%d@K or hang:%d@K with K < %ld)",
                           back->rank, back->iteration, back->rank, back->iteration, back->rank,
                           back->rank, back->iteration);
  }
  return 0;
}
