// libddp's side of the MPI transport: forwards to libddp_mpi.so.
#include "bootstrap/mpi.h"
#include "bootstrap/mpi/plugin_api.h"
#include "transport/mpi/mpi_wire.h"

namespace ddp::transport::mpi {

absl::StatusOr<std::unique_ptr<wire::Wire>> CreateWire(const std::vector<int>& native_ids) {
  std::string why;
  if (!bootstrap::mpi::Available(&why)) return absl::UnimplementedError(why);
  return bootstrap::mpi::Api()->create_wire(native_ids);
}

bool HasAllreduce(int comm_id) {
  return bootstrap::mpi::Available() && bootstrap::mpi::Api()->has_allreduce(comm_id);
}

absl::Status Allreduce(int comm_id, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp op) {
  return bootstrap::mpi::Api()->allreduce(comm_id, send, recv, count, type, op);
}

}  // namespace ddp::transport::mpi
