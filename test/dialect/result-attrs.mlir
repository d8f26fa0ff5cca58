// RUN: %htp-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// Function result attributes: htp.result names a result, htp.grad_of marks
// the gradient of an htp.param argument (same type, one per parameter);
// htp.backward marks a function written by --htp-grad.

// CHECK-LABEL: func.func @named
// CHECK-SAME: -> (tensor<1xf32> {htp.result = "loss"}, tensor<7x12xf32> {htp.grad_of = "head.weight"})
// CHECK-SAME: attributes {htp.backward}
func.func @named(%w: tensor<7x12xf32> {htp.param = "head.weight"}, %l: tensor<1xf32>)
    -> (tensor<1xf32> {htp.result = "loss"}, tensor<7x12xf32> {htp.grad_of = "head.weight"})
    attributes {htp.backward} {
  return %l, %w : tensor<1xf32>, tensor<7x12xf32>
}

// -----

// A sharded parameter's gradient has the local (shard) type.
// CHECK-LABEL: func.func @sharded
func.func @sharded(%w: tensor<6x12xf32> {htp.param = "fc1.weight", htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>})
    -> (tensor<6x12xf32> {htp.grad_of = "fc1.weight"}) attributes {htp.tp = 2 : i64} {
  return %w : tensor<6x12xf32>
}

// -----

// expected-error @+1 {{'htp.result' on result #0 must be a non-empty string}}
func.func @empty_name(%l: tensor<1xf32>) -> (tensor<1xf32> {htp.result = ""}) {
  return %l : tensor<1xf32>
}

// -----

// expected-error @+1 {{'htp.result' on result #0 must be a non-empty string}}
func.func @not_string(%l: tensor<1xf32>) -> (tensor<1xf32> {htp.result = 3 : i64}) {
  return %l : tensor<1xf32>
}

// -----

// expected-error @+1 {{'htp.grad_of' on result #0 must be a non-empty string}}
func.func @grad_of_empty(%w: tensor<7x12xf32> {htp.param = "w"}) -> (tensor<7x12xf32> {htp.grad_of = ""}) {
  return %w : tensor<7x12xf32>
}

// -----

// expected-error @+1 {{unknown htp result attribute 'htp.name' on result #0 (expected 'htp.result' or 'htp.grad_of')}}
func.func @unknown(%l: tensor<1xf32>) -> (tensor<1xf32> {htp.name = "loss"}) {
  return %l : tensor<1xf32>
}

// -----

// expected-error @+1 {{'htp.grad_of' on result #0 names 'head.bias', which is no argument's 'htp.param'}}
func.func @no_param(%w: tensor<7x12xf32> {htp.param = "head.weight"}) -> (tensor<7x12xf32> {htp.grad_of = "head.bias"}) {
  return %w : tensor<7x12xf32>
}

// -----

// A data input is no parameter.
// expected-error @+1 {{'htp.grad_of' on result #0 names 'x', which is no argument's 'htp.param'}}
func.func @input_not_param(%x: tensor<7x12xf32> {htp.input = "x"}) -> (tensor<7x12xf32> {htp.grad_of = "x"}) {
  return %x : tensor<7x12xf32>
}

// -----

// expected-error @+1 {{result #0, the gradient of 'head.weight' (argument #0), has type 'tensor<12x7xf32>' but the parameter has 'tensor<7x12xf32>'}}
func.func @wrong_type(%w: tensor<7x12xf32> {htp.param = "head.weight"}, %v: tensor<12x7xf32>) -> (tensor<12x7xf32> {htp.grad_of = "head.weight"}) {
  return %v : tensor<12x7xf32>
}

// -----

// expected-error @+1 {{results #0 and #1 are both the gradient of 'head.weight' (at most one per parameter)}}
func.func @twice(%w: tensor<7x12xf32> {htp.param = "head.weight"})
    -> (tensor<7x12xf32> {htp.grad_of = "head.weight"}, tensor<7x12xf32> {htp.grad_of = "head.weight"}) {
  return %w, %w : tensor<7x12xf32>, tensor<7x12xf32>
}

// -----

// expected-error @+1 {{result #0 has both 'htp.result' and 'htp.grad_of': a gradient is named after its parameter}}
func.func @both(%w: tensor<7x12xf32> {htp.param = "head.weight"})
    -> (tensor<7x12xf32> {htp.grad_of = "head.weight", htp.result = "g"}) {
  return %w : tensor<7x12xf32>
}

// -----

// expected-error @+1 {{'htp.backward' must be a unit attribute on a function}}
func.func @backward_value(%l: tensor<1xf32>) -> tensor<1xf32> attributes {htp.backward = 1 : i64} {
  return %l : tensor<1xf32>
}
