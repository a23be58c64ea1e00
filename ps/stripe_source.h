// What a replacement server's rebuild asks of its peers (ps/rebuilder.h): reads of stripe
// members, freezes of stripes, parity writes, hot rows and dense tensors. PeerClient is the
// production implementation (gRPC to the peers' ParameterServer service); a test hands the
// Rebuilder a fake to put a stripe in any state, such as caught mid-update. Implementations
// are thread-safe: the rebuild calls them from several threads at once.
#ifndef ECPS_PS_STRIPE_SOURCE_H_
#define ECPS_PS_STRIPE_SOURCE_H_

#include <vector>

#include "absl/status/status.h"

namespace ecps {
namespace v1 {
class FreezeRequest;
class HotRowsRequest;
class HotRowsResponse;
class ReadDenseRequest;
class ReadDenseResponse;
class DenseChecksumsRequest;
class DenseChecksumsResponse;
class ReadRowsRequest;
class ReadRowsResponse;
class WriteParityRequest;
class WriteRowsRequest;
}  // namespace v1

class StripeSource {
 public:
  virtual ~StripeSource() = default;

  // ReadRows (ParameterServerCore::ReadRows) to several peers at once: requests[i] goes to
  // peers[i], its answer to (*responses)[i], how it went to (*statuses)[i] (both resized to
  // peers.size()).
  virtual void ReadRowsFromEach(const std::vector<int>& peers,
                                const std::vector<v1::ReadRowsRequest>& requests,
                                std::vector<v1::ReadRowsResponse>* responses,
                                std::vector<absl::Status>* statuses) = 0;
  // A freeze (or, with request.freeze() false, its release) at `peer`.
  virtual absl::Status Freeze(int peer, const v1::FreezeRequest& request) = 0;
  // Overwrites parity rows at `peer`, under the caller's freeze.
  virtual absl::Status WriteParity(int peer, const v1::WriteParityRequest& request) = 0;
  // The hottest rows of a data server among the stripes `peer` holds parity of.
  virtual absl::Status HotRows(int peer, const v1::HotRowsRequest& request,
                               v1::HotRowsResponse* response) = 0;
  // A dense tensor `peer` holds, with its state and version.
  virtual absl::Status ReadDense(int peer, const v1::ReadDenseRequest& request,
                                 v1::ReadDenseResponse* response) = 0;
  // The online scrub's (ps/online_scrub.h): overwrites data rows at `peer` under the caller's
  // freeze, and the dense checksums `peer` holds. UNIMPLEMENTED unless overridden (a rebuild
  // never calls them).
  virtual absl::Status WriteRows(int peer, const v1::WriteRowsRequest& request);
  virtual absl::Status DenseChecksums(int peer, const v1::DenseChecksumsRequest& request,
                                      v1::DenseChecksumsResponse* response);
};

}  // namespace ecps

#endif  // ECPS_PS_STRIPE_SOURCE_H_
