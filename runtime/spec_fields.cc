// The spec's schema, once: one field table per section (key, how to read it into which
// member, how to render it), and the enums' names. The tables drive ParseSpec's reading and
// unknown-key errors, SpecToYaml and SpecKeyPaths (runtime/spec_parser.h).
#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/spec_enum_names.h"
#include "runtime/spec_field_kinds.h"
#include "runtime/spec_parser.h"

namespace ecps {
namespace spec_internal {
namespace {

// --- the tables ---

const Table<JobSection>& JobTable() {
  using S = JobSection;
  static const auto* table = new Table<S>{
      StringField("name", &S::name),
      StringField("output_dir", &S::output_dir),
      IntField("steps", &S::steps, 1, kMaxSteps),
      IntField("eval_every", &S::eval_every, 0, kMaxSteps),
      IntField("eval_samples", &S::eval_samples, 1, 100'000'000),
      UintField("seed", &S::seed),
      StringField("token", &S::token),
      StringField("resume_from", &S::resume_from),
      BoolField("synchronous", &S::synchronous),
  };
  return *table;
}

const Table<ClusterSection>& ClusterTable() {
  using S = ClusterSection;
  static const auto* table = new Table<S>{
      IntField("servers", &S::servers, 1, 1024),
      IntField("spares", &S::spares, 0, 1024),
      IntField("workers", &S::workers, 1, 1024),
      StringField("host", &S::host),
      StringField("advertise", &S::advertise),
      IntField("coordinator_port", &S::coordinator_port, 0, 65535),
      StringField("coordinator", &S::coordinator),
      IntField("connect_timeout_s", &S::connect_timeout_s, 1, 86'400),
      IntField("coordinator_grace_s", &S::coordinator_grace_s, 1, 86'400),
      IntField("heartbeat_interval_ms", &S::heartbeat_interval_ms, 1, 60'000),
      IntField("heartbeat_timeout_ms", &S::heartbeat_timeout_ms, 1, 600'000),
      IntField("rpc_timeout_ms", &S::rpc_timeout_ms, 1, 3'600'000),
      IntField("worker_threads", &S::worker_threads, 1, 256),
      EnumField("worker_device", &S::worker_device),
      IntField("gpus_per_worker", &S::gpus_per_worker, 1, 16),
      IntField("server_threads", &S::server_threads, 1, 256),
      IntField("max_request_ids", &S::max_request_ids, 1, 1 << 28),
      IntField("max_reply_mb", &S::max_reply_mb, 1, 240),
  };
  return *table;
}

const Table<WorkerSection>& WorkerTable() {
  using S = WorkerSection;
  static const auto* table = new Table<S>{
      EnumField("abft", &S::abft),
      IntField("abft_max_detections", &S::abft_max_detections, 0, 1'000'000),
  };
  return *table;
}

const Table<CoordinatorSection>& CoordinatorTable() {
  using S = CoordinatorSection;
  static const auto* table = new Table<S>{
      IntField("replicas", &S::replicas, 1, 9),
      EnumField("state_store", &S::state_store),
      StringListField("etcd_endpoints", &S::etcd_endpoints, "an etcd member's host:port"),
      StringField("etcd_prefix", &S::etcd_prefix),
      IntField("lease_ttl_s", &S::lease_ttl_s, 1, 60),
  };
  return *table;
}

// model.table_rows: a scalar or a list when read; written as one number when every table has
// the same size, and left out while empty (before CrossCheck fills it).
Field<ModelSection> TableRowsField() {
  return {"table_rows",
          [](SpecParser& p, const Entry& e, const std::string& f, ModelSection* m) {
            p.TableRows(e, f, &m->table_rows);
          },
          [](const ModelSection& m, int indent, std::string* out) {
            if (m.table_rows.empty()) return;
            const bool uniform = std::all_of(m.table_rows.begin(), m.table_rows.end(),
                                             [&](int64_t r) { return r == m.table_rows[0]; });
            if (uniform && m.table_rows.size() == static_cast<size_t>(m.num_sparse)) {
              Line(indent, "table_rows", absl::StrCat(m.table_rows[0]), out);
            } else {
              Line(indent, "table_rows", FlowList(m.table_rows), out);
            }
          },
          nullptr};
}

const Table<ModelSection>& ModelTable() {
  using S = ModelSection;
  static const auto* table = new Table<S>{
      IntField("num_dense", &S::num_dense, 1, 4096),
      IntField("num_sparse", &S::num_sparse, 1, 1024),
      IntField("embedding_dim", &S::embedding_dim, 1, 1024),
      TableRowsField(),
      IntListField("bottom_mlp", &S::bottom_mlp, 1, 65536, 1, 16),
      IntListField("top_mlp", &S::top_mlp, 1, 65536, 0, 16),
      EnumField("pooling", &S::pooling),
  };
  return *table;
}

const Table<SparseOptimizer>& SparseOptimizerTable() {
  using S = SparseOptimizer;
  static const auto* table = new Table<S>{
      EnumField("type", &S::type),
      RealField("lr", &S::lr, 0, true, kInf, false),
      RealField("eps", &S::eps, 0, true, kInf, false),
      RealField("initial_accumulator", &S::initial_accumulator, 0, false, kInf, false),
  };
  return *table;
}

const Table<DenseOptimizer>& DenseOptimizerTable() {
  using S = DenseOptimizer;
  static const auto* table = new Table<S>{
      EnumField("type", &S::type),
      RealField("lr", &S::lr, 0, true, kInf, false),
      RealField("beta1", &S::beta1, 0, false, 1, true),
      RealField("beta2", &S::beta2, 0, false, 1, true),
      RealField("eps", &S::eps, 0, true, kInf, false),
  };
  return *table;
}

const Table<OptimizerSection>& OptimizerTable() {
  using S = OptimizerSection;
  static const auto* table = new Table<S>{
      SectionField("sparse", &S::sparse, SparseOptimizerTable),
      SectionField("dense", &S::dense, DenseOptimizerTable),
  };
  return *table;
}

const Table<SyntheticData>& SyntheticTable() {
  using S = SyntheticData;
  static const auto* table = new Table<S>{
      IntField("num_samples", &S::num_samples, 0, kMaxInt64),
      RealField("zipf_s", &S::zipf_s, 0, true, 10, false),
      UintField("hidden_seed", &S::hidden_seed),
      RealField("label_noise", &S::label_noise, 0, false, 1, false),
  };
  return *table;
}

const Table<DataSection>& DataTable() {
  using S = DataSection;
  static const auto* table = new Table<S>{
      EnumField("source", &S::source),
      StringListField("paths", &S::paths, "a file path"),
      IntField("batch_size", &S::batch_size, 1, 1'000'000),
      RealField("eval_fraction", &S::eval_fraction, 0, false, 1, true),
      IntField("max_bad_lines", &S::max_bad_lines, 0, kMaxInt64),
      IntField("epochs", &S::epochs, 1, 1'000'000),
      BoolField("shuffle", &S::shuffle),
      IntField("shuffle_block_lines", &S::shuffle_block_lines, 1, 1 << 24),
      SectionField("synthetic", &S::synthetic, SyntheticTable),
  };
  return *table;
}

const Table<CheckpointSection>& CheckpointTable() {
  using S = CheckpointSection;
  static const auto* table = new Table<S>{
      StringField("dir", &S::dir),
      IntField("interval_steps", &S::interval_steps, 0, kMaxSteps),
      RealField("interval_seconds", &S::interval_seconds, 0, false, kInf, false),
      BoolField("save_final", &S::save_final),
      IntField("keep", &S::keep, 1, kMaxCheckpointsKept),
      RealField("node_mtbf_hours", &S::node_mtbf_hours, 0, true, kInf, false),
  };
  return *table;
}

const Table<ScrubSection>& ScrubTable() {
  using S = ScrubSection;
  static const auto* table = new Table<S>{
      RealField("interval_s", &S::interval_s, 0, false, kInf, false),
      RealField("rate_mb_s", &S::rate_mb_s, 0, true, kInf, false),
  };
  return *table;
}

const Table<FaultToleranceSection>& FaultToleranceTable() {
  using S = FaultToleranceSection;
  static const auto* table = new Table<S>{
      EnumField("mode", &S::mode),
      IntField("k", &S::k, 1, 254),
      IntField("r", &S::r, 1, 254),
      EnumField("ack", &S::ack),
      IntField("async_window", &S::async_window, 1, 1'000'000),
      IntField("async_linger_ms", &S::async_linger_ms, 0, 10'000),
      EnumField("parity_transport", &S::parity_transport),
      IntField("dense_replicas", &S::dense_replicas, -1, 1023),
      ChoiceField("codec_backend", &S::codec_backend, CodecBackends),
      RealField("rebuild_rate_mb_s", &S::rebuild_rate_mb_s, 0, false, kInf, false),
      SectionField("checkpoint", &S::checkpoint, CheckpointTable),
      SectionField("scrub", &S::scrub, ScrubTable),
  };
  return *table;
}

// One entry of `faults`; at_step's and target's real bounds depend on other sections
// (spec_check.cc).
const Table<FaultSpec>& FaultTable() {
  using S = FaultSpec;
  static const auto* table = new Table<S>{
      IntField("at_step", &S::at_step, -kMaxSteps, kMaxSteps),
      EnumField("action", &S::action),
      IntField("target", &S::target, -kMaxInt, kMaxInt),
      RealField("duration_s", &S::duration_s, 0, false, kInf, false),
  };
  return *table;
}

void ReadFaults(SpecParser& p, const YAML::Node& n, std::vector<FaultSpec>* faults) {
  faults->clear();
  if (!n || n.IsNull()) return;
  if (!n.IsSequence()) {
    p.Error(
        p.LineOfKey("faults"), "faults",
        absl::StrCat("expected a list of faults (- at_step: ..., action: ...), got ", Describe(n)));
    return;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string path = absl::StrCat("faults[", i, "]");
    const YAML::Node& item = n[i];
    const int line =
        SpecParser::LineOfNode(item) > 0 ? SpecParser::LineOfNode(item) : p.LineOfKey("faults");
    p.SetLine(path, line);
    FaultSpec fault;
    if (item.IsNull() || !item.IsMap()) {
      p.Error(line, path,
              absl::StrCat("expected a map with at_step, action, target, duration_s; got ",
                           Describe(item)));
      p.MarkBad(path);
      faults->push_back(fault);
      continue;
    }
    ReadSection(p, item, path, "faults[]", FaultTable(), &fault);
    if (!item["at_step"]) {
      p.Error(line, path + ".at_step", "missing; every fault needs the step it happens at");
    }
    if (!item["action"]) {
      p.Error(line, path + ".action",
              absl::StrCat("missing; must be one of ", absl::StrJoin(AllNames<FaultAction>(), ", ")));
    }
    faults->push_back(fault);
  }
}

Field<JobSpec> FaultsField() {
  return {"faults",
          [](SpecParser& p, const Entry& e, const std::string&, JobSpec* spec) {
            ReadFaults(p, e.value, &spec->faults);
          },
          [](const JobSpec& spec, int indent, std::string* out) {
            const std::string pad(indent, ' ');
            if (spec.faults.empty()) {
              absl::StrAppend(out, pad, "faults: []\n");
              return;
            }
            absl::StrAppend(out, pad, "faults:\n");
            for (const FaultSpec& fault : spec.faults) {
              // The first key opens the list item ("- "); the rest align with it.
              std::string item;
              RenderSection(FaultTable(), fault, indent + 4, &item);
              item.replace(indent + 2, 2, "- ");
              absl::StrAppend(out, item);
            }
          },
          [](const std::string& path, std::vector<SectionKeys>* out) {
            AppendSections(FaultTable(), path + "[]", out);
          }};
}

const Table<MonitoringSection>& MonitoringTable() {
  using S = MonitoringSection;
  static const auto* table = new Table<S>{
      BoolField("progress", &S::progress),
      IntField("metrics_interval_ms", &S::metrics_interval_ms, 10, 3'600'000),
      IntField("report_every_steps", &S::report_every_steps, 1, 1'000'000),
      ChoiceField("log_level", &S::log_level, LogLevels),
      IntField("metrics_port", &S::metrics_port, -1, 65535),
  };
  return *table;
}

const Table<SlurmSection>& SlurmTable() {
  using S = SlurmSection;
  static const auto* table = new Table<S>{
      StringField("partition", &S::partition),
      IntField("nodes", &S::nodes, 1, 100'000),
      StringField("time", &S::time),
      StringField("account", &S::account),
      StringListField("sbatch_options", &S::sbatch_options, "an sbatch option"),
      StringField("binary", &S::binary),
  };
  return *table;
}

const Table<K8sSection>& K8sTable() {
  using S = K8sSection;
  static const auto* table = new Table<S>{
      StringField("namespace", &S::namespace_name),
      StringField("image", &S::image),
      ChoiceField("image_pull_policy", &S::image_pull_policy, ImagePullPolicies),
      StringField("service_account", &S::service_account),
      StringField("coordinator_cpu", &S::coordinator_cpu),
      StringField("coordinator_memory", &S::coordinator_memory),
      StringField("server_cpu", &S::server_cpu),
      StringField("server_memory", &S::server_memory),
      StringField("worker_cpu", &S::worker_cpu),
      StringField("worker_memory", &S::worker_memory),
      StringField("checkpoint_claim", &S::checkpoint_claim),
      StringListField("node_selector", &S::node_selector, "a node label key=value"),
  };
  return *table;
}

const Table<TlsPair>& TlsPairTable() {
  using S = TlsPair;
  static const auto* table = new Table<S>{
      StringField("cert", &S::cert),
      StringField("key", &S::key),
  };
  return *table;
}

const Table<TlsSection>& TlsTable() {
  using S = TlsSection;
  static const auto* table = new Table<S>{
      StringField("ca", &S::ca),
      SectionField("coordinator", &S::coordinator, TlsPairTable),
      SectionField("server", &S::server, TlsPairTable),
      SectionField("worker", &S::worker, TlsPairTable),
      SectionField("admin", &S::admin, TlsPairTable),
  };
  return *table;
}

const Table<SecuritySection>& SecurityTable() {
  using S = SecuritySection;
  static const auto* table = new Table<S>{SectionField("tls", &S::tls, TlsTable)};
  return *table;
}

}  // namespace

const Table<JobSpec>& SpecTable() {
  using S = JobSpec;
  static const auto* table = new Table<S>{
      SectionField("job", &S::job, JobTable),
      SectionField("cluster", &S::cluster, ClusterTable),
      SectionField("worker", &S::worker, WorkerTable),
      SectionField("coordinator", &S::coordinator, CoordinatorTable),
      SectionField("model", &S::model, ModelTable),
      SectionField("optimizer", &S::optimizer, OptimizerTable),
      SectionField("data", &S::data, DataTable),
      SectionField("fault_tolerance", &S::fault_tolerance, FaultToleranceTable),
      FaultsField(),
      SectionField("monitoring", &S::monitoring, MonitoringTable),
      SectionField("slurm", &S::slurm, SlurmTable),
      SectionField("k8s", &S::k8s, K8sTable),
      SectionField("security", &S::security, SecurityTable),
  };
  return *table;
}

const std::vector<SectionKeys>& Schema() {
  static const auto* schema = [] {
    auto* sections = new std::vector<SectionKeys>();
    AppendSections(SpecTable(), "", sections);
    return sections;
  }();
  return *schema;
}

const std::vector<std::string>& KeysOfSection(std::string_view section) {
  for (const auto& s : Schema()) {
    if (section == s.path) return s.keys;
  }
  static const auto* empty = new std::vector<std::string>();
  return *empty;
}

}  // namespace spec_internal

const char* ToString(FaultToleranceMode mode) { return spec_internal::NameOf(mode); }
const char* ToString(AckPolicy ack) { return spec_internal::NameOf(ack); }
const char* ToString(ParityTransport transport) { return spec_internal::NameOf(transport); }
const char* ToString(FaultAction action) { return spec_internal::NameOf(action); }
const char* ToString(SparseOptimizerType type) { return spec_internal::NameOf(type); }
const char* ToString(DenseOptimizerType type) { return spec_internal::NameOf(type); }
const char* ToString(DataSourceType source) { return spec_internal::NameOf(source); }
const char* ToString(PoolingType pooling) { return spec_internal::NameOf(pooling); }
const char* ToString(WorkerDevice device) { return spec_internal::NameOf(device); }
const char* ToString(StateStoreType store) { return spec_internal::NameOf(store); }
const char* ToString(AbftSetting abft) { return spec_internal::NameOf(abft); }

bool BuiltWithCuda() {
#if ECPS_BUILT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string SpecToYaml(const JobSpec& spec) {
  std::string out = "# ecps job spec, every key written out (SpecToYaml)\n";
  spec_internal::RenderSection(spec_internal::SpecTable(), spec, 0, &out);
  return out;
}

std::vector<std::string> SpecKeyPaths() {
  const auto& schema = spec_internal::Schema();
  std::set<std::string> sections;
  for (const auto& s : schema) sections.insert(s.path);
  std::vector<std::string> paths;
  for (const auto& s : schema) {
    for (const std::string& key : s.keys) {
      const std::string path = s.path.empty() ? key : absl::StrCat(s.path, ".", key);
      if (sections.count(path) || sections.count(path + "[]")) continue;  // a section
      paths.push_back(path);
    }
  }
  return paths;
}

}  // namespace ecps
