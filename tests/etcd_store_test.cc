// The etcd client, the leader lease and the etcd state store against a real etcd (label etcd):
// guarded transactions, endpoint failover, one leader at a time, a standby taking over when
// the leader's lease lapses, a leader stepping down when etcd is gone, and a deposed leader's
// save refused; etcd over mutual TLS.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "coordinator/etcd_client.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/leader_lease.h"
#include "runtime/security.h"
#include "gtest/gtest.h"
#include "tests/etcd_cluster.h"
#include "tests/poll.h"

namespace ecps {
namespace {

using testing_process::EtcdBinary;
using testing_process::EtcdCluster;
using testing_process::PickFreePort;
using testing_process::PollUntil;

std::filesystem::path TempDir(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ecps_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdBinary().empty()) {
      GTEST_SKIP() << "etcd is not installed (deploy/setup.sh --tests installs Debian's "
                      "etcd-server and etcd-client)";
    }
    dir_ = TempDir("etcd_store");
    const std::string error = etcd_.Start(1, dir_);
    ASSERT_EQ(error, "");
    auto client = EtcdClient::Create(etcd_.endpoints());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    etcd_.StopAll();
    if (!HasFailure() && !dir_.empty()) std::filesystem::remove_all(dir_);
  }

  LeaderLeaseOptions Options(const std::string& candidate) {
    LeaderLeaseOptions options;
    options.key = "/ecps/test/leader";
    options.candidate = candidate;
    options.ttl_s = 1;
    options.poll = absl::Milliseconds(20);
    return options;
  }

  std::filesystem::path dir_;
  EtcdCluster etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST(EtcdClientTest, RefusesBadEndpointsByName) {
  auto https = EtcdClient::Create({"https://10.0.0.1:2379"});
  ASSERT_FALSE(https.ok());
  EXPECT_EQ(https.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(https.status().message().find("https://10.0.0.1:2379"), std::string::npos);
  EXPECT_NE(https.status().message().find("security.tls"), std::string::npos);
  auto no_port = EtcdClient::Create({"127.0.0.1:2379", "etcd-2"});
  ASSERT_FALSE(no_port.ok());
  EXPECT_NE(no_port.status().message().find("'etcd-2' is not host:port"), std::string::npos);
  EXPECT_FALSE(EtcdClient::Create({}).ok());
  auto ok = EtcdClient::Create({"http://127.0.0.1:2379/"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->endpoints(), std::vector<std::string>{"127.0.0.1:2379"});
}

// etcd over mutual TLS (security.tls): a real etcd serving TLS and asking for client
// certificates of the job's CA. The coordinator's certificate is let in; a plaintext client
// and one whose certificate another CA signed are not; an endpoint's scheme that is not the
// transport is refused by name before anything is sent.
TEST(EtcdTlsTest, SpeaksMutualTlsWithTheRolesCertificateAndNothingElse) {
  if (EtcdBinary().empty()) GTEST_SKIP() << "etcd is not installed (deploy/setup.sh --tests)";
  const std::filesystem::path dir = TempDir("etcd_tls");
  const std::filesystem::path certs = dir / "certs";
  ASSERT_EQ(std::system(("bash " + std::string(ECPS_SOURCE_DIR) + "/tests/tls/make_certs.sh " +
                         certs.string() + " >/dev/null 2>&1")
                            .c_str()),
            0)
      << "openssl could not make the certificates";
  auto identity = [&](const std::string& name, const std::string& ca, Role role) {
    return LoadTlsIdentity(TlsFiles{(certs / (ca + ".pem")).string(),
                                    (certs / (name + ".pem")).string(),
                                    (certs / (name + ".key")).string()},
                           role);
  };
  absl::StatusOr<TlsIdentity> coordinator = identity("coordinator", "ca", Role::kCoordinator);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EtcdCluster etcd;
  etcd.UseTls((certs / "ca.pem").string(), (certs / "etcd.pem").string(),
              (certs / "etcd.key").string(), &*coordinator);
  ASSERT_EQ(etcd.Start(1, dir / "etcd"), "");

  auto client = EtcdClient::Create({"https://" + etcd.endpoint(0)}, absl::Seconds(1),
                                   &*coordinator);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("/ecps/tls/k", "v").ok());
  auto read = (*client)->Get("/ecps/tls/k");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->value, "v");

  auto plaintext = EtcdClient::Create({etcd.endpoint(0)}, absl::Milliseconds(500));
  ASSERT_TRUE(plaintext.ok());
  EXPECT_FALSE((*plaintext)->Get("/ecps/tls/k").ok()) << "a plaintext client was served";
  // It trusts etcd's CA but presents a certificate another CA signed (LoadTlsIdentity would
  // refuse to make such an identity: it is put together by hand).
  TlsIdentity stranger;
  stranger.role = Role::kWorker;
  stranger.ca_pem = coordinator->ca_pem;
  stranger.cert_pem = ReadWhole(certs / "other-worker.pem");
  stranger.key_pem = ReadWhole(certs / "other-worker.key");
  auto other_ca = EtcdClient::Create({etcd.endpoint(0)}, absl::Milliseconds(500), &stranger);
  ASSERT_TRUE(other_ca.ok());
  EXPECT_FALSE((*other_ca)->Get("/ecps/tls/k").ok()) << "another CA's certificate was let in";

  auto http = EtcdClient::Create({"http://" + etcd.endpoint(0)}, absl::Seconds(1), &*coordinator);
  ASSERT_FALSE(http.ok());
  EXPECT_EQ(http.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(http.status().message().find("plaintext http"), std::string::npos)
      << http.status();
  etcd.StopAll();
  std::filesystem::remove_all(dir);
}

TEST_F(EtcdStoreTest, TransactionsHoldOnlyWhileTheirGuardDoes) {
  auto absent = client_->Get("/ecps/t/k");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());

  auto first = client_->CreateIfAbsent("/ecps/t/k", "a", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  auto second = client_->CreateIfAbsent("/ecps/t/k", "b", 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->current.value, "a");
  EXPECT_GT(second->current.create_revision, 0);

  auto guarded = client_->PutIfEqual("/ecps/t/k", "a", "/ecps/t/v", "1");
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  EXPECT_TRUE(*guarded);
  auto refused = client_->PutIfEqual("/ecps/t/k", "b", "/ecps/t/v", "2");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(*refused);
  auto value = client_->Get("/ecps/t/v");
  ASSERT_TRUE(value.ok() && value->has_value());
  EXPECT_EQ((*value)->value, "1");

  auto not_deleted = client_->DeleteIfEqual("/ecps/t/k", "b");
  ASSERT_TRUE(not_deleted.ok());
  EXPECT_FALSE(*not_deleted);
  auto deleted = client_->DeletePrefix("/ecps/t/");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2);
}

TEST_F(EtcdStoreTest, MovesOnFromAMemberThatDoesNotAnswer) {
  const std::string dead = "127.0.0.1:" + std::to_string(PickFreePort());
  auto client = EtcdClient::Create({dead, etcd_.endpoint(0)});
  ASSERT_TRUE(client.ok());
  auto put = (*client)->Put("/ecps/t/failover", "x");
  ASSERT_TRUE(put.ok()) << put.status();
  auto got = (*client)->Get("/ecps/t/failover");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->value, "x");

  auto none = EtcdClient::Create({dead});
  ASSERT_TRUE(none.ok());
  auto failed = (*none)->Get("/ecps/t/failover");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find(dead), std::string::npos) << failed.status();
}

TEST_F(EtcdStoreTest, LeasesExpireAndKeepAlivesRenewThem) {
  auto lease = client_->GrantLease(1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_GE(lease->ttl_s, 1);
  ASSERT_TRUE(client_->Put("/ecps/t/leased", "x", lease->id).ok());
  auto renewed = client_->KeepAlive(lease->id);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->id, lease->id);
  // Not renewed any more: etcd deletes the key once the lease lapses.
  ASSERT_TRUE(PollUntil(
      [&] {
        auto kv = client_->Get("/ecps/t/leased");
        return kv.ok() && !kv->has_value();
      },
      std::chrono::seconds(5)));
  auto gone = client_->KeepAlive(lease->id);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
}

TEST_F(EtcdStoreTest, OneLeaderAtATimeAndAStandbyTakesOverWhenTheLeaseLapses) {
  // A leader that died: its key is attached to a lease nobody renews.
  auto dead_lease = client_->GrantLease(1);
  ASSERT_TRUE(dead_lease.ok());
  auto held = client_->CreateIfAbsent("/ecps/test/leader", "dead-coordinator", dead_lease->id);
  ASSERT_TRUE(held.ok() && held->created);

  LeaderLease standby(client_.get(), Options("standby:1"));
  std::atomic<bool> stop{false};
  absl::Status campaign;
  const auto started = std::chrono::steady_clock::now();
  std::thread campaigner([&] { campaign = standby.Campaign([&] { return stop.load(); }); });
  const bool took_over = PollUntil([&] { return standby.leading(); }, std::chrono::seconds(5));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  stop = true;
  campaigner.join();
  ASSERT_TRUE(took_over);
  EXPECT_TRUE(campaign.ok()) << campaign;
  EXPECT_LT(waited, 3.0);
  auto key = client_->Get("/ecps/test/leader");
  ASSERT_TRUE(key.ok() && key->has_value());
  EXPECT_EQ((*key)->value, standby.value());
  EXPECT_EQ((*key)->lease, standby.lease_id());

  // A second candidate waits while the first renews: longer than three TTLs.
  LeaderLease other(client_.get(), Options("other:2"));
  std::atomic<bool> stop_other{false};
  std::thread other_campaign(
      [&] { other.Campaign([&] { return stop_other.load(); }).IgnoreError(); });
  EXPECT_FALSE(
      PollUntil([&] { return other.leading() || !standby.leading(); }, std::chrono::seconds(3)));
  // The leader resigns: the other takes over at once, without waiting for a lapse.
  standby.Resign();
  EXPECT_FALSE(standby.leading());
  EXPECT_TRUE(PollUntil([&] { return other.leading(); }, std::chrono::seconds(2)));
  stop_other = true;
  other_campaign.join();
}

TEST_F(EtcdStoreTest, ALeaderCutOffFromEtcdStepsDownBeforeItsLeaseEnds) {
  LeaderLease leader(client_.get(), Options("leader:1"));
  ASSERT_TRUE(leader.Campaign([] { return false; }).ok());
  ASSERT_TRUE(leader.leading());
  const auto cut = std::chrono::steady_clock::now();
  etcd_.Kill(0);
  // It renews every quarter TTL and counts itself leader until three quarters past the last
  // answered renewal: gone within one TTL (1 s) of the cut, so before etcd could hand on the
  // key.
  ASSERT_TRUE(PollUntil([&] { return !leader.leading(); }, std::chrono::seconds(3)));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count(), 1.0);
}

TEST_F(EtcdStoreTest, ADeposedLeaderCannotOverwriteItsSuccessorsState) {
  const EtcdJobKeys keys = JobKeys("/ecps/", "test");
  EXPECT_EQ(keys.leader, "/ecps/test/leader");
  EXPECT_EQ(keys.state, "/ecps/test/state");
  LeaderLease old_leader(client_.get(), Options("old:1"));
  ASSERT_TRUE(old_leader.Campaign([] { return false; }).ok());
  EtcdStateStore old_store(client_.get(), &old_leader, keys);
  auto empty = old_store.Load();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_FALSE(empty->has_value());
  ASSERT_TRUE(old_store.Save("term 1").ok());

  // The old leader's key goes behind its back (as a lapse would, seen from etcd), and a new
  // leader takes over while the old one still believes it leads.
  ASSERT_TRUE(client_->DeleteIfEqual(keys.leader, old_leader.value()).ok());
  LeaderLease new_leader(client_.get(), Options("new:2"));
  ASSERT_TRUE(new_leader.Campaign([] { return false; }).ok());
  EtcdStateStore new_store(client_.get(), &new_leader, keys);
  auto loaded = new_store.Load();
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ(**loaded, "term 1");
  ASSERT_TRUE(new_store.Save("term 2").ok());

  ASSERT_TRUE(old_leader.leading());
  absl::Status stale = old_store.Save("stale term 1");
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_FALSE(old_leader.leading());
  EXPECT_EQ(old_store.Save("again").code(), absl::StatusCode::kFailedPrecondition);
  auto now = new_store.Load();
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ(**now, "term 2");
}

}  // namespace
}  // namespace ecps
