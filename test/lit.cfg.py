import os
import lit.formats
from lit.llvm import llvm_config

config.name = "fuyou"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "e2e", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.fuyou_obj_root, "test")

# Exports and oracles need Debian's python (torch 1.13, onnx 1.12).
config.substitutions.insert(0, ("%python", "/usr/bin/python3"))
config.substitutions.append(("%fuyou_src", config.fuyou_src_root))
# Exports from the meta device need torch 2.x (make deps makes its environment).
if os.path.exists(getattr(config, "fuyou_torch2_python", "")):
    config.available_features.add("torch2")
    config.substitutions.append(("%torch2_python", config.fuyou_torch2_python))
config.substitutions.append(("%fuyou_obj", config.fuyou_obj_root))

llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", os.path.join(config.fuyou_obj_root, "bin"), append_path=True)
llvm_config.use_default_substitutions()
from lit.llvm.subst import ToolSubst
tools = [ToolSubst(t, unresolved="ignore") for t in ["fuyou-opt", "fuyou-compile", "fuyou-calibrate", "fuyou-calibrate-cuda", "mlir-translate",
                                                     "FileCheck", "not"]]
llvm_config.add_tool_substitutions(tools, [os.path.join(config.fuyou_obj_root, "bin"), config.llvm_tools_dir])

# "cuda": the compiler can build CUDA programs (nvcc was found); "gpu": one can run here.
import shutil
import subprocess
if getattr(config, "fuyou_have_cuda", False):
    config.available_features.add("cuda")
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        config.available_features.add("gpu")
