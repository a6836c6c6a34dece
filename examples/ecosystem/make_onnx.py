"""Writes specs/softmax.onnx: Softmax over the last axis of a float32 [N, 64] input, with onnx.helper."""

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax", [x], [y])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="acceptance-example")
    made.ir_version = 8
    onnx.checker.check_model(made)
    return made


if __name__ == "__main__":
    onnx.save(model(), Path(__file__).parent / "specs" / "softmax.onnx")
