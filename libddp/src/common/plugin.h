// Optional parts of libddp (the NCCL backend, the MPI bootstrap) are plugins: shared libraries
// beside libddp.so that libddp opens on first use, so that libddp itself never depends on CUDA
// or MPI at run time. Each exports one extern "C" function returning its table of functions.
#pragma once

#include <string>

namespace ddp::plugin {

// Opens `file` (from `env_var` if set, else beside libddp.so, else the loader's search path)
// and calls its `symbol`. Returns the table, or null with `error` saying why. Never unloaded.
const void* Load(const char* file, const char* env_var, const char* symbol, std::string* error);

}  // namespace ddp::plugin
