// The Rebuilder's reads of stripe members, the frozen path, and the installs of rebuilt
// rows (ps/rebuilder.h); the lifecycle and the loops are in rebuilder.cc.
#include "ps/rebuilder.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// How long the survivors honour one of the rebuild's freezes without its release.
constexpr uint32_t kFreezeLeaseMs = 30000;

}  // namespace

absl::Status Rebuilder::RunFrozen(const std::vector<Item>& items, bool restore_dense) {
  const std::vector<int> peers = options_.live_peers();
  const uint64_t epoch = options_.epoch();
  // Freeze only the stripes of these items (updates of other rows go on), except around the
  // dense restore.
  v1::FreezeRequest freeze;
  freeze.set_freeze_id((static_cast<uint64_t>(options_.server) << 48) | ++freeze_count_);
  // A lease the survivors drop if this process dies holding it (the map then says so), or
  // after kFreezeLeaseMs in any case: a frozen batch takes milliseconds.
  freeze.set_owner(options_.instance);
  freeze.set_owner_server(options_.server);
  freeze.set_lease_ms(kFreezeLeaseMs);
  if (!restore_dense) {
    std::map<int, v1::TableStripes*> by_table;
    for (const Item& item : items) {
      v1::TableStripes*& t = by_table[item.table];
      if (t == nullptr) {
        t = freeze.add_stripes();
        t->set_table(item.table);
      }
      t->add_stripes(item.stripe);
    }
  }
  absl::Status frozen = FreezeAll(peers, freeze, epoch, true);
  if (!frozen.ok()) {
    FreezeAll(peers, freeze, epoch, false).IgnoreError();
    return frozen;
  }
  if (options_.hold_freeze_ms > 0) {
    spdlog::warn("server {}: holding freeze {} for {} ms (ECPS_DRILL_HOLD_FREEZE_MS)",
                 options_.server, freeze.freeze_id(), options_.hold_freeze_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.hold_freeze_ms));
  }
  absl::Status result;
  if (!items.empty()) {
    Members members;
    ReadMembers(items, &members);
    result = Install(items, members.got, /*frozen=*/true, nullptr, freeze.freeze_id());
  }
  if (result.ok() && restore_dense) result = RestoreDense();
  absl::Status resumed = FreezeAll(peers, freeze, epoch, false);
  if (!result.ok()) return result;
  return resumed;
}

absl::Status Rebuilder::FreezeAll(const std::vector<int>& peers,
                                  const v1::FreezeRequest& freeze, uint64_t epoch, bool on) {
  std::vector<std::function<void()>> tasks;
  std::vector<absl::Status> statuses(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    tasks.push_back([&, i] {
      v1::FreezeRequest req = freeze;
      FillHeader(req.mutable_header(), options_.token, epoch, sender_);
      req.set_freeze(on);
      statuses[i] = peers_->Freeze(peers[i], req);
    });
  }
  fanout_.Run(std::move(tasks));
  for (size_t i = 0; i < peers.size(); ++i) {
    if (!statuses[i].ok()) {
      return absl::Status(statuses[i].code(), absl::StrCat("freeze of server ", peers[i], ": ",
                                                           statuses[i].message()));
    }
  }
  return absl::OkStatus();
}

void Rebuilder::PlanReads(const std::vector<Item>& items, const std::set<int>& unusable,
                          Members* out) const {
  const int k = placement_.k(), n = placement_.n();
  const size_t bytes = payload_bytes_;
  StripeMembers& got = out->got;
  got.Reset(items.size(), k, n, bytes);
  // One request per server with its data and parity members of every table of the batch,
  // all servers at once. The lists are kept from batch to batch (cleared, not freed).
  const int servers = placement_.servers(), tables = placement_.num_tables();
  std::vector<uint8_t> readable(servers, 1);
  for (int s : unusable) {
    if (s >= 0 && s < servers) readable[s] = 0;
  }
  if (options_.server >= 0 && options_.server < servers) readable[options_.server] = 0;
  out->wants.resize(servers);
  for (ServerWants& ws : out->wants) {
    ws.data.resize(tables);
    ws.parity.resize(tables);
    for (Want& w : ws.data) w.clear();
    for (Want& w : ws.parity) w.clear();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    const int mine = MyMember(item.table, item.stripe);
    for (int m = 0; m < n; ++m) {
      if (m == mine) continue;
      if (m < k && item.stripe * k + m >= placement_.rows(item.table)) {
        // A padding member past the table's end: zero, never updated.
        got.have[got.slot(i, m)] = 1;
        std::memset(got.payload(i, m), 0, bytes);
        continue;
      }
      int server = placement_.ServerOf(item.table, item.stripe, m);
      if (!readable[server]) continue;
      ServerWants& ws = out->wants[server];
      Want& w = (m < k ? ws.data : ws.parity)[item.table];
      w.ids.push_back(m < k ? item.stripe * k + m : item.stripe);
      w.slots.push_back(got.slot(i, m));
    }
  }
}

size_t Rebuilder::CountOf(const std::vector<Want>& by_table) {
  size_t count = 0;
  for (const Want& w : by_table) count += w.ids.size();
  return count;
}

void Rebuilder::FillReadRequest(const ServerWants& ws, uint64_t epoch,
                                v1::ReadRowsRequest* req) const {
  FillHeader(req->mutable_header(), options_.token, epoch, sender_);
  const int tables = placement_.num_tables();
  for (int table = 0; table < tables; ++table) {
    const Want& w = ws.data[table];
    if (w.ids.empty()) continue;
    v1::TableRows* t = req->add_tables();
    t->set_table(table);
    t->mutable_rows()->Add(w.ids.begin(), w.ids.end());
  }
  for (int table = 0; table < tables; ++table) {
    const Want& w = ws.parity[table];
    if (w.ids.empty()) continue;
    v1::TableStripes* t = req->add_parity();
    t->set_table(table);
    t->mutable_stripes()->Add(w.ids.begin(), w.ids.end());
  }
  req->set_rebuilder(options_.server);
}

void Rebuilder::StoreAnswer(const ServerWants& ws, const v1::ReadRowsResponse& resp,
                            StripeMembers* got) const {
  const int k = placement_.k(), n = placement_.n();
  const size_t bytes = payload_bytes_;
  const size_t data = CountOf(ws.data), parity = CountOf(ws.parity);
  const v1::ReadParityResponse& p = resp.parity();
  if (resp.payloads().size() != data * bytes || static_cast<size_t>(resp.versions_size()) != data ||
      p.payloads().size() != parity * bytes ||
      static_cast<size_t>(p.versions_size()) != parity * k ||
      static_cast<size_t>(p.settled_size()) != parity) {
    return;
  }
  size_t e = 0;
  for (const Want& w : ws.data) {
    for (const size_t slot : w.slots) {
      std::memcpy(got->payloads.data() + slot * bytes, resp.payloads().data() + e * bytes, bytes);
      got->have[slot] = 1;
      got->versions[slot * k + slot % n] = resp.versions(static_cast<int>(e));
      ++e;
    }
  }
  e = 0;
  for (const Want& w : ws.parity) {
    for (const size_t slot : w.slots) {
      std::memcpy(got->payloads.data() + slot * bytes, p.payloads().data() + e * bytes, bytes);
      got->have[slot] = 1;
      std::copy_n(p.versions().data() + e * k, k, got->versions.data() + slot * k);
      got->settled[slot] = p.settled(static_cast<int>(e)) ? 1 : 0;
      ++e;
    }
  }
}

void Rebuilder::ReadMembers(const std::vector<Item>& items, Members* out) const {
  const std::set<int> unusable = options_.unusable();
  const uint64_t epoch = options_.epoch();
  PlanReads(items, unusable, out);
  // One request per server, all sent at once from this thread. A server that cannot answer
  // leaves its members unknown.
  std::vector<int> targets;
  std::vector<v1::ReadRowsRequest> requests;
  for (int server = 0; server < placement_.servers(); ++server) {
    const ServerWants& ws = out->wants[server];
    if (CountOf(ws.data) + CountOf(ws.parity) == 0) continue;
    targets.push_back(server);
    FillReadRequest(ws, epoch, &requests.emplace_back());
  }
  std::vector<v1::ReadRowsResponse> responses;
  std::vector<absl::Status> statuses;
  peers_->ReadRowsFromEach(targets, requests, &responses, &statuses);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (!statuses[r].ok()) continue;
    StoreAnswer(out->wants[targets[r]], responses[r], &out->got);
  }
}

absl::Status Rebuilder::CollectParityFixes(const Item& item, size_t i, int mine,
                                           const StripeMembers& mem, const uint8_t* decoded,
                                           const std::vector<uint32_t>& agreed,
                                           std::vector<std::vector<uint8_t>>* parity,
                                           ParityFixes* fixes) const {
  const int k = placement_.k(), r = placement_.r();
  const size_t bytes = payload_bytes_;
  const uint8_t* have = mem.have.data() + mem.slot(i, 0);
  auto member = [&](int m) { return mem.payload(i, m); };
  auto says = [&](int m, int j) { return mem.says(i, m, j); };
  // Make the survivors' parity rows of this stripe agree with its data.
  bool all_data = true;
  std::vector<const uint8_t*> data(k);
  for (int j = 0; j < k; ++j) {
    all_data &= j == mine || have[j] != 0;
    data[j] = j == mine ? decoded : member(j);
  }
  if (!all_data) return absl::OkStatus();
  std::vector<uint8_t*> pp;
  for (auto& p : *parity) pp.push_back(p.data());
  RETURN_IF_ERROR(code_->Encode(data, pp, bytes));
  for (int q = 0; q < r; ++q) {
    const std::vector<uint8_t>& computed = (*parity)[q];
    bool same_versions = true;
    for (int j = 0; j < k; ++j) same_versions &= says(k + q, j) == agreed[j];
    if (!have[k + q] ||
        (same_versions && std::memcmp(computed.data(), member(k + q), bytes) == 0)) {
      continue;
    }
    int server = placement_.ServerOf(item.table, item.stripe, k + q);
    v1::WriteParityRequest& fix = (*fixes)[{server, item.table}];
    fix.set_table(item.table);
    fix.add_stripes(item.stripe);
    fix.mutable_payloads()->append(reinterpret_cast<const char*>(computed.data()), bytes);
    for (int j = 0; j < k; ++j) fix.add_versions(agreed[j]);
  }
  return absl::OkStatus();
}

absl::Status Rebuilder::WriteParityFixes(uint64_t epoch, uint64_t freeze_id, ParityFixes* fixes) {
  for (auto& [key, fix] : *fixes) {
    FillHeader(fix.mutable_header(), options_.token, epoch, sender_);
    fix.set_freeze_id(freeze_id);
    fix.set_owner(options_.instance);
    RETURN_IF_ERROR(peers_->WriteParity(key.first, fix));
    spdlog::info("server {}: made {} parity rows of table {} on server {} agree with their data",
                 options_.server, fix.stripes_size(), key.second, key.first);
  }
  return absl::OkStatus();
}

absl::Status Rebuilder::Install(const std::vector<Item>& items, const StripeMembers& mem,
                                bool frozen, std::vector<Item>* retry, uint64_t freeze_id) {
  const int k = placement_.k(), r = placement_.r();
  const size_t bytes = payload_bytes_;
  const uint64_t epoch = options_.epoch();
  absl::Status result;
  std::vector<uint8_t> out(bytes);
  std::vector<uint32_t> agreed(k);
  std::vector<std::vector<uint8_t>> parity(r, std::vector<uint8_t>(bytes));
  ParityFixes fixes;
  int64_t installed = 0;
  std::vector<int> ids;
  std::vector<const uint8_t*> ptrs;
  for (size_t i = 0; i < items.size() && result.ok(); ++i) {
    const Item& item = items[i];
    const int mine = MyMember(item.table, item.stripe);
    if (!AgreedVersions(mem, i, mine, absl::MakeSpan(agreed)) && !frozen) {
      retry->push_back(item);
      continue;
    }
    if (!DecodePlan(mem, i, &ids)) {
      result = absl::UnavailableError(absl::StrCat("stripe ", item.stripe, " of table ",
                                                   item.table, " has only ", ids.size(),
                                                   " reachable members, needs ", k));
      break;
    }
    ptrs.clear();
    for (int m : ids) ptrs.push_back(mem.payload(i, m));
    int wanted = mine;
    uint8_t* out_ptr = out.data();
    result = code_->Decode(ids, ptrs, absl::MakeConstSpan(&wanted, 1),
                           absl::MakeSpan(&out_ptr, 1), bytes);
    if (!result.ok()) break;
    if (mine >= k) {
      const ParityStore::Install done = parity_->InstallRow(item.table, item.stripe, out.data(),
                                                             agreed.data());
      if (done == ParityStore::Install::kStale) {
        // A delta newer than the data read arrived (and was dropped) before the install.
        if (frozen) {
          result = absl::InternalError(absl::StrCat("parity of stripe ", item.stripe,
                                                    " of table ", item.table,
                                                    " saw a newer delta while frozen"));
          break;
        }
        retry->push_back(item);
        continue;
      }
      installed += done == ParityStore::Install::kInstalled ? 1 : 0;
      continue;
    }
    if (frozen && r > 1) {
      result = CollectParityFixes(item, i, mine, mem, out.data(), agreed, &parity, &fixes);
      if (!result.ok()) break;
    }
    // InstallRow copies the payload bytewise, so the decoded bytes can go as they are.
    if (embeddings_->InstallRow(item.table, item.stripe * k + mine,
                                reinterpret_cast<const float*>(out.data()), agreed[mine])) {
      ++installed;
    }
  }
  if (result.ok()) result = WriteParityFixes(epoch, freeze_id, &fixes);
  rows_done_.fetch_add(installed, std::memory_order_relaxed);
  return result;
}

absl::Status Rebuilder::RestoreDense() {
  const std::set<int> unusable = options_.unusable();
  for (int t = 0; t < dense_->num_tensors(); ++t) {
    if (!dense_->Holds(t)) continue;
    // Any other live holder: the primary when this server is a replica, else a replica.
    // Every live holder is read and the newest copy taken: a primary that died between its
    // replicas may have left one of them an update ahead of the other (the primary then
    // brings the other up to date, see ParameterServerCore::PushDense).
    std::vector<int> holders = dense_->ReplicasOf(t);
    holders.insert(holders.begin(), dense_->PrimaryOf(t));
    v1::ReadDenseResponse resp;
    bool found = false;
    for (int h : holders) {
      if (h == options_.server || unusable.count(h) > 0) continue;
      v1::ReadDenseRequest req;
      FillHeader(req.mutable_header(), options_.token, options_.epoch(), sender_);
      req.set_tensor(t);
      v1::ReadDenseResponse copy;
      if (absl::Status s = peers_->ReadDense(h, req, &copy); !s.ok()) return s;
      if (!found || copy.version() > resp.version()) resp = std::move(copy);
      found = true;
    }
    if (!found) {
      return absl::DataLossError(absl::StrCat("dense tensor ", t, " has no live copy to restore"));
    }
    std::vector<float> weights(resp.weights().size() / sizeof(float));
    std::vector<float> state(resp.state().size() / sizeof(float));
    std::memcpy(weights.data(), resp.weights().data(), resp.weights().size());
    std::memcpy(state.data(), resp.state().data(), resp.state().size());
    if (absl::Status s = dense_->Restore(t, weights, state, resp.version()); !s.ok()) return s;
  }
  // The sweep's batch that restored the tensors notifies EnsureDense when it returns.
  dense_ready_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace ecps
