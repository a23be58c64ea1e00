// The parity listener's frame decoding (ps/tcp_deltas.h) on arbitrary bytes, as a stranger on
// the TCP port would send them: a head, its MAC check, then the body. The first byte picks
// whether the head is re-signed with the servers' key first, so that the fuzzer also reaches
// what a holder of the credential could send (the length check and the body's decoding). A
// frame may be refused for anything; decoding must never crash, and nothing a head announces
// is allocated before it checks out.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "proto/ecps.pb.h"
#include "ps/tcp_deltas.h"
#include "runtime/security.h"

namespace ecps {
namespace {

constexpr char kKey[] = "ecps-server-0123456789abcdef0123456789abcdef";
constexpr int64_t kMaxFrame = 1 << 20;

void Decode(std::string_view bytes) {
  if (bytes.empty()) return;
  const bool sign = (bytes[0] & 1) != 0;
  bytes.remove_prefix(1);
  std::string head(bytes.substr(0, kFrameHeadBytes));
  bytes.remove_prefix(head.size());
  if (sign && head.size() == kFrameHeadBytes) {
    // The fuzzer's fields, signed as a server would sign them.
    FrameHead fields;
    std::memcpy(&fields.length, head.data() + 4, 4);
    std::memcpy(&fields.from_server, head.data() + 8, 4);
    std::memcpy(&fields.seq, head.data() + 12, 8);
    head = EncodeFrameHead(fields, kKey);
  }
  absl::StatusOr<FrameHead> decoded = DecodeFrameHead(head, kMaxFrame);
  if (!decoded.ok()) return;
  if (MessageMac(kKey, FrameHeadSigned(head)) != FrameHeadMac(head)) return;
  if (decoded->length > kMaxFrame) std::abort();  // the limit let a frame through
  // The body is what follows, cut to the announced length (a stream delivers no more).
  const std::string_view body = bytes.substr(0, decoded->length);
  v1::ParityDeltaBatch batch;
  if (DecodeFrameBody(*decoded, body, &batch).ok() &&
      (batch.from_server() != decoded->from_server || batch.seq() != decoded->seq ||
       body.size() != decoded->length)) {
    std::abort();  // a batch accepted that is not the one its head names
  }
}

}  // namespace
}  // namespace ecps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ecps::Decode(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
