// RUN: %htp-opt %s --htp-grad | FileCheck %s
// RUN: %htp-opt %s --htp-grad | %htp-opt | FileCheck %s
// RUN: %htp-opt %s --htp-tensor-parallel=tp=2 --htp-grad | FileCheck %s --check-prefix=TP2
// RUN: sed -n '/^func.func @block_loss(/,/^}/p' %s | %htp-opt --htp-tensor-parallel=tp=2 --htp-balance-hooks --htp-grad | FileCheck %s --check-prefix=HOOKS
//
// --htp-grad adds @F_grad after each loss function @F: the forward, then
// each op's adjoint in reverse order; results are the forward's, then one
// gradient per htp.param in argument order, marked htp.grad_of. A value
// used twice (the residual stream) gets the htp.add of both adjoints.

// CHECK-LABEL: func.func @block_loss(
// CHECK-NOT: htp.backward
// CHECK: return
// CHECK-LABEL: func.func @block_loss_grad(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3x8xf32> {htp.input = "x"}
// CHECK-SAME: %[[T:[a-z0-9]+]]: tensor<2x5xf32> {htp.input = "targets"}
// CHECK-SAME: %[[G1:[a-z0-9]+]]: tensor<8xf32> {htp.param = "norm1.weight"}
// CHECK-SAME: %[[B1:[a-z0-9]+]]: tensor<8xf32> {htp.param = "norm1.bias"}
// CHECK-SAME: %[[QKV:[a-z0-9]+]]: tensor<24x8xf32> {htp.param = "attn.qkv.weight"}
// CHECK-SAME: %[[QKVB:[a-z0-9]+]]: tensor<24xf32> {htp.param = "attn.qkv.bias"}
// CHECK-SAME: %[[PW:[a-z0-9]+]]: tensor<8x8xf32> {htp.param = "attn.proj.weight"}
// CHECK-SAME: %[[PB:[a-z0-9]+]]: tensor<8xf32> {htp.param = "attn.proj.bias"}
// CHECK-SAME: %[[G2:[a-z0-9]+]]: tensor<8xf32> {htp.param = "norm2.weight"}
// CHECK-SAME: %[[B2:[a-z0-9]+]]: tensor<8xf32> {htp.param = "norm2.bias"}
// CHECK-SAME: %[[FC1:[a-z0-9]+]]: tensor<16x8xf32> {htp.param = "fc1.weight"}
// CHECK-SAME: %[[FC1B:[a-z0-9]+]]: tensor<16xf32> {htp.param = "fc1.bias"}
// CHECK-SAME: %[[FC2:[a-z0-9]+]]: tensor<8x16xf32> {htp.param = "fc2.weight"}
// CHECK-SAME: %[[HW:[a-z0-9]+]]: tensor<5x8xf32> {htp.param = "head.weight"}
// CHECK-SAME: -> (tensor<1xf32> {htp.result = "loss"}, tensor<2x5xf32> {htp.result = "logits"},
// CHECK-SAME: tensor<8xf32> {htp.grad_of = "norm1.weight"}, tensor<8xf32> {htp.grad_of = "norm1.bias"},
// CHECK-SAME: tensor<24x8xf32> {htp.grad_of = "attn.qkv.weight"}
// CHECK-SAME: tensor<5x8xf32> {htp.grad_of = "head.weight"})
// CHECK-SAME: attributes {htp.backward}
// The forward, unchanged.
// CHECK: %[[N1:.+]] = htp.layer_norm %[[X]], %[[G1]], %[[B1]] {epsilon = 9.99999974E-6 : f32}
// CHECK: %[[A:.+]] = htp.attention %[[N1]]
// CHECK: %[[R1:.+]] = htp.add %[[X]], %[[A]]
// CHECK: %[[N2:.+]] = htp.layer_norm %[[R1]], %[[G2]], %[[B2]]
// CHECK: %[[H:.+]] = htp.linear %[[N2]], %[[FC1]], %[[FC1B]]
// CHECK: %[[GE:.+]] = htp.gelu %[[H]] approximate tanh
// CHECK: %[[M:.+]] = htp.linear %[[GE]], %[[FC2]]
// CHECK: %[[R2:.+]] = htp.add %[[R1]], %[[M]]
// CHECK: %[[C:.+]] = htp.cls_token %[[R2]]
// CHECK: %[[L:.+]] = htp.linear %[[C]], %[[HW]] :
// CHECK: %[[LOSS:.+]] = htp.cross_entropy %[[L]], %[[T]]
// The adjoints, in reverse.
// CHECK: %[[DL:.+]] = htp.cross_entropy_grad %[[L]], %[[T]]
// CHECK: %[[DC:.+]], %[[DHW:.+]] = htp.linear_grad %[[C]], %[[HW]], %[[DL]] : {{.*}} -> (tensor<2x8xf32>, tensor<5x8xf32>)
// CHECK: %[[DR2:.+]] = htp.cls_token_grad %[[DC]]
// CHECK: %[[DGE:.+]], %[[DFC2:.+]] = htp.linear_grad %[[GE]], %[[FC2]], %[[DR2]]
// CHECK: %[[DH:.+]] = htp.gelu_grad %[[H]], %[[DGE]] approximate tanh
// CHECK: %[[DN2:.+]], %[[DFC1:.+]], %[[DFC1B:.+]] = htp.linear_grad %[[N2]], %[[FC1]], %[[DH]]
// CHECK: %[[DR1P:.+]], %[[DG2:.+]], %[[DB2:.+]] = htp.layer_norm_grad %[[R1]], %[[G2]], %[[DN2]] {epsilon = 9.99999974E-6 : f32}
// CHECK: %[[DR1:.+]] = htp.add %[[DR2]], %[[DR1P]]
// CHECK: %[[DN1:.+]], %[[DQKV:.+]], %[[DQKVB:.+]], %[[DPW:.+]], %[[DPB:.+]] = htp.attention_grad %[[N1]], %[[QKV]], %[[QKVB]], %[[PW]], %[[DR1]] {num_heads = 2 : i64}
// CHECK: %[[DXP:.+]], %[[DG1:.+]], %[[DB1:.+]] = htp.layer_norm_grad %[[X]], %[[G1]], %[[DN1]]
// CHECK-NOT: htp.all_reduce
// CHECK: return %[[LOSS]], %[[L]], %[[DG1]], %[[DB1]], %[[DQKV]], %[[DQKVB]], %[[DPW]], %[[DPB]], %[[DG2]], %[[DB2]], %[[DFC1]], %[[DFC1B]], %[[DFC2]], %[[DHW]] :

// Split over 2 ranks: the forward's all-reduces are the identity in
// backward (the proj bias_add after the attention's gives a row_sum), and the replicated
// input of each split op (the attention, fc1) gets its partial gradient
// all-reduced; fc2 and the head need none.
// TP2-LABEL: func.func @block_loss_grad(
// TP2-SAME: %{{.*}}: tensor<12x8xf32> {htp.param = "attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>}
// TP2-SAME: tensor<12x8xf32> {htp.grad_of = "attn.qkv.weight"}
// TP2-SAME: tensor<8x8xf32> {htp.grad_of = "fc1.weight"}
// TP2-SAME: attributes {htp.backward, htp.tp = 2 : i64}
// TP2: htp.cross_entropy_grad
// TP2: htp.linear_grad {{.*}} -> (tensor<2x8xf32>, tensor<5x8xf32>)
// TP2-NEXT: htp.cls_token_grad
// TP2-NEXT: htp.linear_grad {{.*}} : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8x8xf32>)
// TP2-NEXT: htp.gelu_grad
// TP2-NEXT: %[[DN2:.+]], %{{.*}}, %{{.*}} = htp.linear_grad
// TP2-NEXT: %[[DN2R:.+]] = htp.all_reduce %[[DN2]]
// TP2-NEXT: htp.layer_norm_grad %{{.*}}, %{{.*}}, %[[DN2R]]
// TP2-NEXT: htp.add
// TP2-NEXT: htp.row_sum
// TP2-NEXT: %[[DN1:.+]], %{{.*}}, %{{.*}}, %{{.*}} = htp.attention_grad {{.*}} {num_heads = 1 : i64}
// TP2-NEXT: %[[DN1R:.+]] = htp.all_reduce %[[DN1]]
// TP2-NEXT: htp.layer_norm_grad %{{.*}}, %{{.*}}, %[[DN1R]]
// TP2-NEXT: htp.add
// TP2-NEXT: return
// Split over 2 ranks and hooked first (the order of --htp-pipeline; the
// hooks pass takes @block_loss alone, which sed cuts out): the backward is
// the hooked forward's. The hooked attention's adjoint is an
// htp.attention_grad with its pair (four results: no proj bias), the
// htp.mlp's one htp.mlp_grad with its pair, unit width and GELU; the input
// gradient of each is this rank's part, all-reduced.
// HOOKS-LABEL: func.func @block_loss_grad(
// HOOKS-SAME: attributes {htp.backward, htp.tp = 2 : i64}
// HOOKS: %[[N1:.+]] = htp.layer_norm %arg0
// HOOKS: htp.attention %[[N1]], %[[QKV:[^,]+]], %[[QKVB:[^,]+]], %[[PW:[^ ]+]] {num_heads = 1 : i64, pair = 0 : i64}
// HOOKS: %[[N2:.+]] = htp.layer_norm
// HOOKS: htp.mlp %[[N2]], %[[FC1:[^,]+]], %[[FC2:[^ ]+]] fc1_bias(%[[FC1B:[^)]+]]) approximate tanh {pair = 1 : i64, unit_width = 1 : i64}
// HOOKS: htp.cls_token_grad
// HOOKS-NEXT: %[[DN2:[^,]+]], %[[DFC1:[^,]+]], %[[DFC2:[^,]+]], %[[DFC1B:[^ ]+]] = htp.mlp_grad %[[N2]], %[[FC1]], %[[FC2]], %{{[^ ]+}} fc1_bias(%[[FC1B]]) approximate tanh {pair = 1 : i64, unit_width = 1 : i64} : (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>)
// HOOKS-NEXT: %[[DN2R:.+]] = htp.all_reduce %[[DN2]]
// HOOKS-NEXT: htp.layer_norm_grad %{{.*}}, %{{.*}}, %[[DN2R]]
// HOOKS-NEXT: htp.add
// HOOKS-NEXT: htp.row_sum
// HOOKS-NEXT: %[[DN1:[^,]+]], %[[DQKV:[^,]+]], %[[DQKVB:[^,]+]], %[[DPW:[^ ]+]] = htp.attention_grad %[[N1]], %[[QKV]], %[[QKVB]], %[[PW]], %{{[^ ]+}} {num_heads = 1 : i64, pair = 0 : i64} : {{.*}} -> (tensor<2x3x8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x4xf32>)
// HOOKS-NEXT: %[[DN1R:.+]] = htp.all_reduce %[[DN1]]
// HOOKS-NEXT: htp.layer_norm_grad %{{.*}}, %{{.*}}, %[[DN1R]]
// HOOKS-NEXT: htp.add
// HOOKS-NEXT: return {{.*}}, %[[DQKV]], %[[DQKVB]], %[[DPW]], %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %[[DFC1]], %[[DFC1B]], %[[DFC2]], %{{[^,]+}} :
func.func @block_loss(%x: tensor<2x3x8xf32> {htp.input = "x"},
                      %t: tensor<2x5xf32> {htp.input = "targets"},
                      %g1: tensor<8xf32> {htp.param = "norm1.weight"},
                      %b1: tensor<8xf32> {htp.param = "norm1.bias"},
                      %qkv: tensor<24x8xf32> {htp.param = "attn.qkv.weight"},
                      %qkvb: tensor<24xf32> {htp.param = "attn.qkv.bias"},
                      %pw: tensor<8x8xf32> {htp.param = "attn.proj.weight"},
                      %pb: tensor<8xf32> {htp.param = "attn.proj.bias"},
                      %g2: tensor<8xf32> {htp.param = "norm2.weight"},
                      %b2: tensor<8xf32> {htp.param = "norm2.bias"},
                      %fc1: tensor<16x8xf32> {htp.param = "fc1.weight"},
                      %fc1b: tensor<16xf32> {htp.param = "fc1.bias"},
                      %fc2: tensor<8x16xf32> {htp.param = "fc2.weight"},
                      %hw: tensor<5x8xf32> {htp.param = "head.weight"})
    -> (tensor<1xf32> {htp.result = "loss"}, tensor<2x5xf32> {htp.result = "logits"}) {
  %n1 = htp.layer_norm %x, %g1, %b1 {epsilon = 1.0e-05 : f32}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %a = htp.attention %n1, %qkv, %qkvb, %pw, %pb {num_heads = 2 : i64}
      : (tensor<2x3x8xf32>, tensor<24x8xf32>, tensor<24xf32>, tensor<8x8xf32>, tensor<8xf32>)
      -> tensor<2x3x8xf32>
  %r1 = htp.add %x, %a : tensor<2x3x8xf32>
  %n2 = htp.layer_norm %r1, %g2, %b2 {epsilon = 1.0e-05 : f32}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %h = htp.linear %n2, %fc1, %fc1b
      : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
  %ge = htp.gelu %h approximate tanh : tensor<2x3x16xf32>
  %m = htp.linear %ge, %fc2 : (tensor<2x3x16xf32>, tensor<8x16xf32>) -> tensor<2x3x8xf32>
  %r2 = htp.add %r1, %m : tensor<2x3x8xf32>
  %c = htp.cls_token %r2 : (tensor<2x3x8xf32>) -> tensor<2x8xf32>
  %l = htp.linear %c, %hw : (tensor<2x8xf32>, tensor<5x8xf32>) -> tensor<2x5xf32>
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss, %l : tensor<1xf32>, tensor<2x5xf32>
}

// An htp.mlp (written here by hand, in an unsplit function) gets one
// htp.mlp_grad with its pair, unit width and GELU; without fc1 bias it has
// no dfc1_bias, and unsplit its dx is not all-reduced.
// CHECK-LABEL: func.func @mlp_loss_grad(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x8xf32> {htp.input = "x"}
// CHECK-SAME: %[[W1:[a-z0-9]+]]: tensor<16x8xf32> {htp.param = "fc1.weight"}
// CHECK-SAME: %[[W2:[a-z0-9]+]]: tensor<8x16xf32> {htp.param = "fc2.weight"}
// CHECK: %[[M:.+]] = htp.mlp %[[X]], %[[W1]], %[[W2]] approximate tanh {pair = 1 : i64, unit_width = 4 : i64}
// CHECK: %[[DM:.+]] = htp.cross_entropy_grad %[[M]]
// CHECK-NEXT: %{{[^,]+}}, %[[DW1:[^,]+]], %[[DW2:[^ ]+]] = htp.mlp_grad %[[X]], %[[W1]], %[[W2]], %[[DM]] approximate tanh {pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
// CHECK-NEXT: return %{{[^,]+}}, %[[DW1]], %[[DW2]] :
func.func @mlp_loss(%x: tensor<2x8xf32> {htp.input = "x"},
                    %w1: tensor<16x8xf32> {htp.param = "fc1.weight"},
                    %w2: tensor<8x16xf32> {htp.param = "fc2.weight"},
                    %t: tensor<2x8xf32> {htp.input = "targets"}) -> tensor<1xf32> {
  %m = htp.mlp %x, %w1, %w2 approximate tanh {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<2x8xf32>
  %loss = htp.cross_entropy %m, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// Not a loss function (result #0 is no cross_entropy), and a private one:
// left alone.
// CHECK-LABEL: func.func @forward(
// CHECK-NOT: func.func @forward_grad
// CHECK-NOT: func.func @hidden_grad
func.func @forward(%x: tensor<2x3x8xf32>, %w: tensor<5x8xf32> {htp.param = "w"}) -> tensor<2x3x5xf32> {
  %y = htp.linear %x, %w : (tensor<2x3x8xf32>, tensor<5x8xf32>) -> tensor<2x3x5xf32>
  return %y : tensor<2x3x5xf32>
}

func.func private @hidden(%l: tensor<2x5xf32>, %t: tensor<2x5xf32>) -> tensor<1xf32> {
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
