"""`python tests/llama_server.py ARGS…`: llama-cpp-python's own OpenAI-compatible server
(`python -m llama_cpp.server ARGS…`, a real engine that is not ours), with the one change
ResponseKit's in-process engine makes too: no AMX weight repacking on CPUs where llama.cpp's
AMX kernel crashes on Q4_K models (`llama_sequence.avoid_amx_repacking`)."""

import runpy

from responsekit.backends.llama_sequence import avoid_amx_repacking

avoid_amx_repacking()
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
