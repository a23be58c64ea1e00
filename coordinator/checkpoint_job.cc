#include "coordinator/checkpoint_job.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/store.h"
#include "checkpoint/writer.h"
#include "coordinator/frozen_servers.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace fs = std::filesystem;
namespace {

// Asks every server at once to write its part of the checkpoint into `tmp_dir` (one attempt
// each: a retry would write rows twice into the partial sums); their answers go to *saved.
// The error of the first server that could not save, empty when all did.
std::string SaveOnEachServer(
    const std::vector<std::unique_ptr<v1::ParameterServer::Stub>>& stubs,
    const std::vector<std::string>& addresses, const std::string& token,
    const CoordinatorStamp& stamp, const RpcOptions& options, int rpc_timeout_ms,
    const std::string& tmp_dir,
    const std::function<void(int server, const std::string& address)>& on_unreachable,
    std::vector<v1::SaveCheckpointResponse>* saved) {
  std::vector<absl::Status> results(stubs.size());
  std::vector<std::thread> threads;
  RpcOptions save_options = options;
  save_options.deadline_ms = std::max(rpc_timeout_ms, 600000);  // a large table takes a while
  save_options.max_attempts = 1;  // a retry would write rows twice into the partial sums
  for (size_t s = 0; s < stubs.size(); ++s) {
    threads.emplace_back([&, s] {
      v1::SaveCheckpointRequest req;
      FillHeader(req.mutable_header(), token, stamp, "checkpoint");
      req.set_tmp_dir(tmp_dir);
      results[s] = CallWithRetry(save_options, [&](grpc::ClientContext* ctx) {
        return stubs[s]->SaveCheckpoint(ctx, req, &(*saved)[s]);
      });
      if (on_unreachable && absl::IsUnavailable(results[s]) && !AnsweredByPeer(results[s])) {
        on_unreachable(static_cast<int>(s), addresses[s]);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t s = 0; s < stubs.size(); ++s) {
    if (!results[s].ok()) {
      return absl::StrCat("server ", s, " could not save: ", results[s].ToString());
    }
  }
  return "";
}

// What the servers' answers add up to: per table the XOR of their checksums, the dense
// tensors' entries, the bytes written.
struct SavedParts {
  std::vector<uint64_t> checksums;
  std::vector<DenseEntry> dense;
  int64_t bytes = 0;
};

// Adds up the servers' answers into *parts. The error when they do not make up the model of
// `layout` (a table's rows written other than once, a dense tensor other than once), empty
// when they do.
std::string AddUpSaved(const std::vector<v1::SaveCheckpointResponse>& saved,
                       const CheckpointLayout& layout, SavedParts* parts) {
  const size_t tables = layout.table_rows.size();
  std::vector<uint64_t>& checksums = parts->checksums;
  checksums.assign(tables, 0);
  std::vector<int64_t> rows(tables, 0);
  std::vector<DenseEntry>& dense = parts->dense;
  dense.assign(layout.dense_sizes.size(), DenseEntry{});
  std::vector<int> dense_seen(layout.dense_sizes.size(), 0);
  std::string error;
  for (size_t s = 0; s < saved.size() && error.empty(); ++s) {
    const v1::SaveCheckpointResponse& r = saved[s];
    if (static_cast<size_t>(r.table_checksums_size()) != tables ||
        static_cast<size_t>(r.rows_written_size()) != tables) {
      error = absl::StrCat("server ", s, " reported ", r.table_checksums_size(),
                           " tables, the model has ", tables);
      break;
    }
    for (size_t t = 0; t < tables; ++t) {
      checksums[t] ^= r.table_checksums(t);
      rows[t] += r.rows_written(t);
    }
    for (const v1::CheckpointDenseEntry& d : r.dense()) {
      if (d.tensor() < 0 || static_cast<size_t>(d.tensor()) >= dense.size()) {
        error = absl::StrCat("server ", s, " reported dense tensor ", d.tensor());
        break;
      }
      dense[d.tensor()] = DenseEntry{d.version(), d.checksum()};
      ++dense_seen[d.tensor()];
    }
    parts->bytes += r.bytes();
  }
  for (size_t t = 0; t < tables && error.empty(); ++t) {
    if (rows[t] != layout.table_rows[t]) {
      error = absl::StrCat("table ", t, ": the servers wrote ", rows[t], " rows, it has ",
                           layout.table_rows[t]);
    }
  }
  for (size_t d = 0; d < dense.size() && error.empty(); ++d) {
    if (dense_seen[d] != 1) {
      error = absl::StrCat("dense tensor ", d, " was written ", dense_seen[d], " times");
    }
  }
  return error;
}

}  // namespace

v1::CheckpointReport SaveCheckpointOnServers(
    const std::vector<std::string>& addresses, const std::string& token,
    const CoordinatorStamp& stamp,
    int rpc_timeout_ms, const std::string& root, CheckpointLayout layout,
    const std::function<CheckpointProgress()>& progress,
    const std::function<void(int server, const std::string& address)>& on_unreachable) {
  const auto start = std::chrono::steady_clock::now();
  v1::CheckpointReport report;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs;
  for (const std::string& a : addresses) {
    stubs.push_back(v1::ParameterServer::NewStub(MakeChannel(a, Role::kServer)));
  }
  RpcOptions options;
  options.deadline_ms = std::max(rpc_timeout_ms, 60000);
  FrozenServers frozen(stubs, token, stamp, "checkpoint", options);
  std::string error = frozen.error();
  // The code the coordinator acts on (ALREADY_EXISTS: that step was saved before).
  absl::StatusCode code = absl::StatusCode::kAborted;
  std::string tmp_dir;
  if (error.empty()) {
    // Every update the servers hold is in; nothing changes until the unfreeze.
    CheckpointProgress p = progress();
    layout.step = p.step;
    report.set_step(p.step);
    for (int64_t pos : p.reader_positions) report.add_reader_positions(pos);
    auto begun = BeginCheckpoint(root, layout);
    if (!begun.ok()) {
      error = begun.status().ToString();
      code = begun.status().code();
    } else {
      tmp_dir = *begun;
    }
  }
  std::vector<v1::SaveCheckpointResponse> saved(stubs.size());
  if (error.empty()) {
    error = SaveOnEachServer(stubs, addresses, token, stamp, options, rpc_timeout_ms, tmp_dir,
                             on_unreachable, &saved);
  }
  if (error.empty()) {
    SavedParts parts;
    error = AddUpSaved(saved, layout, &parts);
    if (error.empty()) {
      std::vector<int64_t> positions(report.reader_positions().begin(),
                                     report.reader_positions().end());
      std::string final_dir;
      absl::Status s =
          CommitCheckpoint(tmp_dir, layout, parts.checksums, parts.dense, positions, &final_dir);
      if (!s.ok()) {
        error = s.ToString();
        code = s.code();
      } else {
        report.set_dir(final_dir);
        report.set_bytes(parts.bytes);
      }
    }
  }
  if (absl::Status st = frozen.Resume(); !st.ok() && error.empty()) error = st.ToString();
  if (!error.empty() && !tmp_dir.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);  // never taken for a checkpoint anyway; do not leave it around
  }
  report.set_error(error);
  report.set_error_code(error.empty() ? 0 : static_cast<int>(code));
  report.set_done(error.empty());
  report.set_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return report;
}

absl::StatusOr<v1::CheckpointReport> ReloadCheckpointOnServers(
    const std::vector<std::string>& addresses, const std::string& token,
    const CoordinatorStamp& stamp,
    int rpc_timeout_ms, const std::string& root) {
  const auto start = std::chrono::steady_clock::now();
  auto dir = LatestCheckpoint(root);
  if (!dir.ok()) return dir.status();
  auto manifest = ReadManifest(*dir);
  if (!manifest.ok()) return manifest.status();
  RpcOptions options;
  options.deadline_ms = std::max(rpc_timeout_ms, 600000);
  std::vector<absl::Status> results(addresses.size());
  std::vector<std::thread> threads;
  for (size_t s = 0; s < addresses.size(); ++s) {
    threads.emplace_back([&, s] {
      auto stub = v1::ParameterServer::NewStub(MakeChannel(addresses[s], Role::kServer));
      v1::LoadCheckpointRequest req;
      FillHeader(req.mutable_header(), token, stamp, "rollback");
      req.set_dir(*dir);
      v1::LoadCheckpointResponse resp;
      results[s] = CallWithRetry(
          options, [&](grpc::ClientContext* ctx) { return stub->LoadCheckpoint(ctx, req, &resp); });
    });
  }
  for (auto& t : threads) t.join();
  for (size_t s = 0; s < results.size(); ++s) {
    if (!results[s].ok()) {
      return absl::Status(results[s].code(), absl::StrCat("server ", s, " could not reload ", *dir,
                                                          ": ", results[s].message()));
    }
  }
  v1::CheckpointReport report;
  report.set_done(true);
  report.set_dir(*dir);
  report.set_step(manifest->layout.step);
  for (int64_t p : manifest->reader_positions) report.add_reader_positions(p);
  report.set_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return report;
}

}  // namespace ecps
