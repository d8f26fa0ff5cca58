// RUN: not %htp-opt %s --htp-tensor-parallel=tp=4611686018427387904 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not %htp-opt %s --htp-tensor-parallel=tp=1025 2>&1 | FileCheck %s --check-prefix=OVER
// RUN: not %htp-opt %s --htp-tensor-parallel=tp=-3 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: %htp-opt %s --htp-tensor-parallel=tp=1024 | FileCheck %s --check-prefix=MAX
// tp is bounded by HTP_ENTRY_MAX_TP before anything is multiplied by it:
// 3 * tp for the qkv blocks would overflow int64 at tp = 2^62.

// HUGE: error: --htp-tensor-parallel: tp must be from 1 to 1024 (HTP_ENTRY_MAX_TP), got 4611686018427387904
// OVER: error: --htp-tensor-parallel: tp must be from 1 to 1024 (HTP_ENTRY_MAX_TP), got 1025
// NEG: error: --htp-tensor-parallel: tp must be from 1 to 1024 (HTP_ENTRY_MAX_TP), got -3
// MAX: attributes {htp.tp = 1024 : i64}
// MAX-NEXT: htp.attention {{.*}} {num_heads = 1 : i64} : (tensor<1x2x4xf32>, tensor<12x4xf32>, tensor<12xf32>, tensor<4x4xf32>)
func.func @heads(%x: tensor<1x2x4xf32>, %wqkv: tensor<12288x4xf32>, %bqkv: tensor<12288xf32>,
                 %wproj: tensor<4x4096xf32>) -> tensor<1x2x4xf32> {
  %y = htp.attention %x, %wqkv, %bqkv, %wproj {num_heads = 1024 : i64} : (tensor<1x2x4xf32>, tensor<12288x4xf32>, tensor<12288xf32>, tensor<4x4096xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}
