// Error kinds as status payloads, and across gRPC (runtime/rpc.h) beside the AnsweredByPeer
// mark.
#include "runtime/error_kind.h"

#include "gtest/gtest.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

TEST(ErrorKind, AttachedAsAPayloadNeverReadFromTheMessage) {
  const absl::Status plain = absl::FailedPreconditionError("stale epoch 3 < 4");
  EXPECT_EQ(ErrorKindOf(plain), ErrorKind::kNone);
  const absl::Status stale = WithErrorKind(plain, ErrorKind::kStaleEpoch);
  EXPECT_TRUE(HasErrorKind(stale, ErrorKind::kStaleEpoch));
  EXPECT_FALSE(HasErrorKind(stale, ErrorKind::kReplicaBehind));
  EXPECT_EQ(stale.message(), plain.message());
  EXPECT_EQ(stale.code(), plain.code());
  EXPECT_EQ(ErrorKindOf(WithErrorKind(stale, ErrorKind::kReplicaBehind)),
            ErrorKind::kReplicaBehind);
  EXPECT_EQ(ErrorKindOf(WithErrorKind(stale, ErrorKind::kNone)), ErrorKind::kNone);
  EXPECT_TRUE(WithErrorKind(absl::OkStatus(), ErrorKind::kStaleEpoch).ok());
  EXPECT_FALSE(HasErrorKind(absl::OkStatus(), ErrorKind::kNone));
}

TEST(ErrorKind, NamesRoundTrip) {
  for (int i = 0; i < kErrorKindCount; ++i) {
    const auto kind = static_cast<ErrorKind>(i);
    EXPECT_EQ(ErrorKindNamed(ErrorKindName(kind)), kind) << ErrorKindName(kind);
  }
  EXPECT_EQ(ErrorKindNamed("no such kind"), ErrorKind::kNone);
  EXPECT_EQ(ErrorKindName(ErrorKind::kStaleEpoch), "stale_epoch");
}

TEST(ErrorKindOverGrpc, TheKindAndTheMarkSurviveTheWire) {
  const absl::Status stale = WithErrorKind(
      absl::FailedPreconditionError("stale epoch 3 < 4 from worker-0"), ErrorKind::kStaleEpoch);
  const grpc::Status wire = ToGrpcStatus(stale);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(wire.error_message(), "stale epoch 3 < 4 from worker-0");  // unchanged for people
  EXPECT_EQ(wire.error_details(), "ecps:answered;kind=stale_epoch");
  EXPECT_TRUE(AnsweredByPeer(wire));
  const absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(back.message(), stale.message());
  EXPECT_TRUE(HasErrorKind(back, ErrorKind::kStaleEpoch));
  EXPECT_TRUE(AnsweredByPeer(back));
}

TEST(ErrorKindOverGrpc, AnErrorWithoutAKindIsMarkedAsBefore) {
  const grpc::Status wire = ToGrpcStatus(absl::UnavailableError("initialising"));
  EXPECT_EQ(wire.error_details(), "ecps:answered");
  const absl::Status back = FromGrpcStatus(wire);
  EXPECT_TRUE(AnsweredByPeer(back));
  EXPECT_EQ(ErrorKindOf(back), ErrorKind::kNone);
}

TEST(ErrorKindOverGrpc, OnlyAnEcpsHandlersDetailsCarryAKind) {
  // gRPC's own error (a vanished peer) has no details: neither mark nor kind.
  const absl::Status gone =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"));
  EXPECT_FALSE(AnsweredByPeer(gone));
  EXPECT_EQ(ErrorKindOf(gone), ErrorKind::kNone);
  // Details of someone else's: not ours, whatever they say.
  const grpc::Status other(grpc::StatusCode::FAILED_PRECONDITION, "x",
                           "ecps:answeredX;kind=stale_epoch");
  EXPECT_FALSE(AnsweredByPeer(other));
  EXPECT_EQ(ErrorKindOf(FromGrpcStatus(other)), ErrorKind::kNone);
  // A kind this build does not know (a newer peer's): answered, no kind.
  const grpc::Status newer(grpc::StatusCode::FAILED_PRECONDITION, "x",
                           "ecps:answered;kind=from_the_future");
  EXPECT_TRUE(AnsweredByPeer(newer));
  EXPECT_EQ(ErrorKindOf(FromGrpcStatus(newer)), ErrorKind::kNone);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace ecps
