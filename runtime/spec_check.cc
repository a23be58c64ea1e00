// Checks that span fields, and the defaults derived from other fields (runtime/spec_parser.h).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/net.h"
#include "runtime/spec_parser.h"

namespace ecps {
namespace spec_internal {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDefaultTableRows = 100000;
// The most embedding weights one server may be given (docs/spec.md, model.table_rows): 64
// TiB, past the memory of the largest single machines sold.
constexpr int64_t kMaxServerTableBytes = int64_t{64} << 40;
constexpr int kCriteoDense = 13;
constexpr int kCriteoSparse = 26;

bool IsValidJobName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// Kubernetes' names and values (k8s:), checked here so that a bad one is refused with its
// line like any other key, not by the API server after `kubectl apply`.
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// An RFC 1123 label: a namespace, one part of a DNS name.
bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

// An RFC 1123 subdomain: the name of a claim or a service account.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!IsDnsLabel(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// A label's name or value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends (a value
// may be empty).
bool IsLabelText(std::string_view s) {
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A resource quantity as Kubernetes reads one, unsigned: digits with an optional fraction,
// then a decimal suffix (m k M G T P E), a binary one (Ki ... Ei) or an exponent (e3, E-2).
bool IsQuantity(std::string_view q) {
  size_t i = 0;
  int digits = 0;
  while (i < q.size() && std::isdigit(static_cast<unsigned char>(q[i]))) ++i, ++digits;
  if (i < q.size() && q[i] == '.') {
    ++i;
    while (i < q.size() && std::isdigit(static_cast<unsigned char>(q[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  const std::string_view suffix = q.substr(i);
  for (std::string_view known : {"", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti",
                                 "Pi", "Ei"}) {
    if (suffix == known) return true;
  }
  if (suffix[0] != 'e' && suffix[0] != 'E') return false;
  std::string_view exponent = suffix.substr(1);
  if (!exponent.empty() && (exponent[0] == '+' || exponent[0] == '-')) exponent.remove_prefix(1);
  return !exponent.empty() && std::all_of(exponent.begin(), exponent.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// coordinator: standbys need etcd (the state log is one host's), and etcd needs members.
void CheckCoordinator(SpecParser& p, CoordinatorSection* c) {
  const bool etcd = c->state_store == StateStoreType::kEtcd;
  if (!p.Bad({"coordinator.replicas", "coordinator.state_store"}) && c->replicas > 1 && !etcd) {
    p.ErrorAt("coordinator.replicas", {"coordinator.replicas"},
              absl::StrCat(c->replicas, " coordinators (standbys) need coordinator.state_store: "
                           "etcd, where they elect the active one; got state_store: file"));
  }
  if (!p.Bad({"coordinator.etcd_endpoints", "coordinator.state_store"})) {
    if (etcd && c->etcd_endpoints.empty()) {
      p.ErrorAt("coordinator.etcd_endpoints", {"coordinator.state_store"},
                "state_store: etcd needs the etcd members' client addresses (host:port each)");
    } else if (!etcd && !c->etcd_endpoints.empty()) {
      p.ErrorAt("coordinator.etcd_endpoints", {"coordinator.etcd_endpoints"},
                "is set but coordinator.state_store is file: set state_store: etcd to use etcd");
    }
  }
  for (size_t i = 0; i < c->etcd_endpoints.size() && !p.Bad({"coordinator.etcd_endpoints"});
       ++i) {
    const std::string path = absl::StrCat("coordinator.etcd_endpoints[", i, "]");
    std::string address = c->etcd_endpoints[i];
    if (absl::StartsWith(address, "http://")) address = address.substr(7);
    if (absl::StartsWith(address, "https://")) {
      p.ErrorAt(path, {path, "coordinator.etcd_endpoints"},
                "https is not supported: etcd's client URLs on the cluster's network, plaintext "
                "(docs/deploy.md)");
    } else if (absl::Status s = CheckDialAddress(address); !s.ok()) {
      p.ErrorAt(path, {path, "coordinator.etcd_endpoints"}, std::string(s.message()));
    }
  }
  const std::string& prefix = c->etcd_prefix;
  if (!p.Bad({"coordinator.etcd_prefix"}) &&
      (prefix.empty() || prefix.front() != '/' || prefix.back() != '/' ||
       prefix.find_first_of(" \t\n") != std::string::npos)) {
    p.ErrorAt("coordinator.etcd_prefix", {"coordinator.etcd_prefix"},
              absl::StrCat("must start and end with / and hold no spaces (the job's keys are "
                           "PREFIX<job.name>/leader and /state), got ",
                           Quoted(prefix)));
  }
}

void CheckK8s(SpecParser& p, const K8sSection& k8s) {
  if (!p.Bad({"k8s.namespace"}) && !IsDnsLabel(k8s.namespace_name)) {
    p.ErrorAt("k8s.namespace", {"k8s.namespace"},
              absl::StrCat("must be a Kubernetes namespace: at most 63 lower-case letters, "
                           "digits and -, a letter or digit at both ends, got ",
                           Quoted(k8s.namespace_name)));
  }
  // The image lands in every pod's spec as written; a space or a quote is a typo there.
  if (!p.Bad({"k8s.image"}) &&
      k8s.image.find_first_of(" \t\n'\"`$\\") != std::string::npos) {
    p.ErrorAt("k8s.image", {"k8s.image"},
              absl::StrCat("must be a container image reference such as "
                           "registry.example.org/ecps:1.0 (no spaces, quotes or $), got ",
                           Quoted(k8s.image)));
  }
  for (auto [key, value] : {std::pair<const char*, const std::string*>{
                                "service_account", &k8s.service_account},
                            {"checkpoint_claim", &k8s.checkpoint_claim}}) {
    const std::string path = absl::StrCat("k8s.", key);
    if (p.Bad({path}) || value->empty() || IsDnsSubdomain(*value)) continue;
    p.ErrorAt(path, {path},
              absl::StrCat("must be a Kubernetes object name: lower-case letters, digits, - "
                           "and ., a letter or digit at both ends of each part, got ",
                           Quoted(*value)));
  }
  for (auto [key, value] : {std::pair<const char*, const std::string*>{
                                "coordinator_cpu", &k8s.coordinator_cpu},
                            {"coordinator_memory", &k8s.coordinator_memory},
                            {"server_cpu", &k8s.server_cpu},
                            {"server_memory", &k8s.server_memory},
                            {"worker_cpu", &k8s.worker_cpu},
                            {"worker_memory", &k8s.worker_memory}}) {
    const std::string path = absl::StrCat("k8s.", key);
    if (p.Bad({path}) || value->empty() || IsQuantity(*value)) continue;
    p.ErrorAt(path, {path},
              absl::StrCat("must be a Kubernetes quantity such as 2, 500m or 8Gi (a number, "
                           "then one of m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent "
                           "such as e3), or empty for none; got ",
                           Quoted(*value)));
  }
  std::set<std::string> keys;
  for (size_t i = 0; i < k8s.node_selector.size() && !p.Bad({"k8s.node_selector"}); ++i) {
    const std::string& entry = k8s.node_selector[i];
    const std::string path = absl::StrCat("k8s.node_selector[", i, "]");
    const size_t eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    const size_t slash = key.find('/');
    const bool key_ok = slash == std::string::npos
                            ? IsLabelText(key)
                            : IsDnsSubdomain(std::string_view(key).substr(0, slash)) &&
                                  IsLabelText(std::string_view(key).substr(slash + 1));
    const std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (eq == std::string::npos || !key_ok || (!value.empty() && !IsLabelText(value))) {
      p.ErrorAt(path, {path, "k8s.node_selector"},
                absl::StrCat("must be a node label as key=value (e.g. "
                             "kubernetes.io/arch=amd64: a key of at most 63 of A-Z a-z 0-9 _ . -, "
                             "with an optional DNS prefix/, and such a value), got ",
                             Quoted(entry)));
    } else if (!keys.insert(key).second) {
      p.ErrorAt(path, {path, "k8s.node_selector"},
                absl::StrCat("names label ", key, " a second time; a node has one value per "
                             "label"));
    }
  }
}

}  // namespace

std::string SpecParser::InputFile(const std::string& file, const std::string& path,
                                  std::initializer_list<std::string> line_paths) {
  fs::path resolved(file);
  if (resolved.is_relative() && !base_dir_.empty()) {
    std::error_code ec;
    fs::path abs = fs::absolute(base_dir_ / resolved, ec);
    resolved = (ec ? base_dir_ / resolved : abs).lexically_normal();
  }
  std::error_code ec;
  if (!fs::exists(resolved, ec)) {
    Error(LineOf(line_paths), path,
          absl::StrCat("no such file: ", resolved.string(),
                       base_dir_.empty() ? ""
                                         : " (relative paths are resolved against the spec "
                                           "file's folder)"));
    return "";
  }
  if (fs::is_directory(resolved, ec)) {
    Error(LineOf(line_paths), path,
          absl::StrCat("is a directory, expected a file: ", resolved.string()));
    return "";
  }
  return resolved.string();
}

void SpecParser::CheckTls(TlsSection* tls) {
  struct File {
    std::string key;
    std::string* value;
    bool required;  // when TLS is on
  };
  const std::vector<File> files = {
      {"ca", &tls->ca, true},
      {"coordinator.cert", &tls->coordinator.cert, true},
      {"coordinator.key", &tls->coordinator.key, true},
      {"server.cert", &tls->server.cert, true},
      {"server.key", &tls->server.key, true},
      {"worker.cert", &tls->worker.cert, true},
      {"worker.key", &tls->worker.key, true},
      {"admin.cert", &tls->admin.cert, false},
      {"admin.key", &tls->admin.key, false},
  };
  bool any = false;
  for (const File& f : files) any = any || !f.value->empty();
  if (!any) return;
  for (const File& f : files) {
    const std::string path = "security.tls." + f.key;
    if (Bad({path})) continue;
    if (f.value->empty()) {
      if (f.required) {
        ErrorAt(path, {path, "security.tls"},
                "is required with TLS: security.tls needs ca and a cert and key for the "
                "coordinator, the servers and the workers (docs/security.md)");
      }
      continue;
    }
    std::string resolved = InputFile(*f.value, path, {path});
    if (!resolved.empty()) *f.value = std::move(resolved);
  }
  if (tls->admin.cert.empty() != tls->admin.key.empty() && !Bad({"security.tls.admin"})) {
    ErrorAt("security.tls.admin", {"security.tls.admin"},
            "needs both cert and key, or neither");
  }
}

void SpecParser::CheckJob(JobSection* job_section) {
  JobSection& job = *job_section;
  if (!Bad({"job.name"}) && !IsValidJobName(job.name)) {
    ErrorAt("job.name", {"job.name"},
            absl::StrCat("must be 1 to 128 characters from A-Z a-z 0-9 . _ - (and not . or ..), "
                         "got ",
                         Quoted(job.name)));
  }
  if (job.output_dir.empty()) job.output_dir = "runs/" + job.name;
  if (!Bad({"job.token"})) {
    bool printable = job.token.size() <= 256;
    for (char c : job.token) printable = printable && c > 0x20 && c < 0x7f;
    if (!printable) {
      ErrorAt("job.token", {"job.token"},
              "must be at most 256 printable ASCII characters without spaces (it travels in "
              "RPC metadata)");
    }
  }
  if (!job.resume_from.empty() && !Bad({"job.resume_from"})) {
    std::error_code ec;
    if (!fs::is_directory(job.resume_from, ec)) {
      ErrorAt("job.resume_from", {"job.resume_from"},
              absl::StrCat("no such checkpoint directory: ", job.resume_from));
    }
  }
}

void SpecParser::CheckWorkerDevice(const ClusterSection& cluster) {
  if (!Bad({"cluster.worker_device"}) && cluster.worker_device == WorkerDevice::kCuda &&
      !BuiltWithCuda()) {
    ErrorAt("cluster.worker_device", {"cluster.worker_device"},
            "cuda, but this ecps was built without CUDA (no toolkit when it was built): "
            "rebuild where nvcc is installed, or use worker_device: cpu");
  }
  if (!Bad({"cluster.gpus_per_worker", "cluster.worker_device"}) && cluster.gpus_per_worker > 1 &&
      cluster.worker_device != WorkerDevice::kCuda) {
    ErrorAt(
        "cluster.gpus_per_worker", {"cluster.gpus_per_worker"},
        absl::StrCat(cluster.gpus_per_worker, " GPUs per worker need cluster.worker_device: cuda"));
  }
}

void SpecParser::CheckSlurm(const SlurmSection& slurm) {
  for (auto [key, value] :
       {std::pair<const char*, const std::string*>{"partition", &slurm.partition},
        {"time", &slurm.time},
        {"account", &slurm.account}}) {
    const std::string path = absl::StrCat("slurm.", key);
    if (Bad({path}) || value->empty()) continue;
    if (value->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789_.:,-") != std::string::npos) {
      ErrorAt(path, {path},
              absl::StrCat("must hold only letters, digits and _.:,- (as sbatch takes it), got '",
                           *value, "'"));
    }
  }
  for (size_t i = 0; i < slurm.sbatch_options.size() && !Bad({"slurm.sbatch_options"}); ++i) {
    const std::string& option = slurm.sbatch_options[i];
    const std::string path = absl::StrCat("slurm.sbatch_options[", i, "]");
    if (option.rfind("--", 0) != 0 || option.find_first_of("'\"`$\\") != std::string::npos) {
      ErrorAt(path, {path, "slurm.sbatch_options"},
              absl::StrCat("must be one long sbatch option such as --mem=8G (no quotes, $ or "
                           "backslashes), got '",
                           option, "'"));
    }
  }
}

void SpecParser::CheckClusterAddresses(const ClusterSection& cluster) {
  if (!Bad({"cluster.host"}) && cluster.host.find_first_of(" \t/") != std::string::npos) {
    ErrorAt(
        "cluster.host", {"cluster.host"},
        absl::StrCat("must be a host name or address (e.g. 0.0.0.0), got '", cluster.host, "'"));
  }
  // What CheckDialAddress accepts as a host (a wildcard is not: nobody can dial it).
  if (!Bad({"cluster.advertise"}) && !cluster.advertise.empty() &&
      !CheckDialAddress(cluster.advertise + ":1").ok()) {
    ErrorAt("cluster.advertise", {"cluster.advertise"},
            absl::StrCat("must be a host name or address peers can dial, got '", cluster.advertise,
                         "'"));
  }
  // One address, or the coordinator's and its standbys' (coordinator.replicas), comma-separated.
  if (!Bad({"cluster.coordinator"}) && !cluster.coordinator.empty()) {
    if (auto s = SplitDialAddresses(cluster.coordinator); !s.ok()) {
      ErrorAt("cluster.coordinator", {"cluster.coordinator"}, std::string(s.status().message()));
    }
  }
  if (!Bad({"cluster.heartbeat_timeout_ms", "cluster.heartbeat_interval_ms"}) &&
      cluster.heartbeat_timeout_ms <= cluster.heartbeat_interval_ms) {
    ErrorAt("cluster.heartbeat_timeout_ms",
            {"cluster.heartbeat_timeout_ms", "cluster.heartbeat_interval_ms"},
            absl::StrCat("must be greater than cluster.heartbeat_interval_ms (",
                         cluster.heartbeat_interval_ms, "), got ", cluster.heartbeat_timeout_ms));
  }
}

void SpecParser::CheckModel(const ClusterSection& cluster, ModelSection* model_section) {
  ModelSection& model = *model_section;
  if (!Bad({"model.table_rows", "model.num_sparse"})) {
    if (!table_rows_given_) {
      model.table_rows.assign(model.num_sparse, kDefaultTableRows);
    } else if (table_rows_scalar_) {
      int64_t rows = model.table_rows.at(0);
      model.table_rows.assign(model.num_sparse, rows);
    } else if (model.table_rows.size() != static_cast<size_t>(model.num_sparse)) {
      ErrorAt("model.table_rows", {"model.table_rows"},
              absl::StrCat("must have one entry per sparse feature (model.num_sparse = ",
                           model.num_sparse, "), got ", model.table_rows.size(),
                           " entries; or give one number for every table"));
    }
  }
  // Sizes no machine has: the weights alone (no optimizer state, no parity) that one server
  // would hold, over kMaxServerTableBytes. Caught here rather than by each server's
  // allocation after the job has started.
  if (!Bad({"model.table_rows", "model.num_sparse", "model.embedding_dim", "cluster.servers"}) &&
      model.table_rows.size() == static_cast<size_t>(model.num_sparse) && cluster.servers > 0) {
    double rows = 0;
    for (int64_t r : model.table_rows) rows += static_cast<double>(r);
    const double per_server = rows * model.embedding_dim * sizeof(float) / cluster.servers;
    if (per_server > static_cast<double>(kMaxServerTableBytes)) {
      ErrorAt("model.table_rows", {"model.table_rows", "model.embedding_dim", "cluster.servers"},
              absl::StrFormat("%.0f rows of %d floats over %d servers are %.0f TiB of weights "
                              "per server before optimizer state and parity, more than any "
                              "machine has (the bound is %d TiB): make model.table_rows "
                              "smaller or add servers",
                              rows, model.embedding_dim, cluster.servers,
                              per_server / double(int64_t{1} << 40),
                              static_cast<int>(kMaxServerTableBytes >> 40)));
    }
  }
  if (!Bad({"model.bottom_mlp", "model.embedding_dim"}) && !model.bottom_mlp.empty() &&
      model.bottom_mlp.back() != model.embedding_dim) {
    ErrorAt(
        "model.bottom_mlp", {"model.bottom_mlp", "model.embedding_dim"},
        absl::StrCat("last layer must equal model.embedding_dim (", model.embedding_dim,
                     ") so dense and sparse features can interact, got ", model.bottom_mlp.back()));
  }
}

void SpecParser::CheckData(const ModelSection& model, DataSection* data_section) {
  DataSection& data = *data_section;
  const bool criteo = data.source != DataSourceType::kSynthetic;
  if (!Bad({"data.source"}) && criteo) {
    if (!Bad({"model.num_dense"}) && model.num_dense != kCriteoDense) {
      ErrorAt("model.num_dense", {"model.num_dense", "data.source"},
              absl::StrCat("must be ", kCriteoDense, " when data.source is ", ToString(data.source),
                           " (Criteo rows have 13 integer features), got ", model.num_dense));
    }
    if (!Bad({"model.num_sparse"}) && model.num_sparse != kCriteoSparse) {
      ErrorAt(
          "model.num_sparse", {"model.num_sparse", "data.source"},
          absl::StrCat("must be ", kCriteoSparse, " when data.source is ", ToString(data.source),
                       " (Criteo rows have 26 categorical features), got ", model.num_sparse));
    }
    if (!Bad({"data.paths"})) {
      if (data.paths.empty()) {
        ErrorAt("data.paths", {"data.paths", "data.source"},
                absl::StrCat("must list at least one input file when data.source is ",
                             ToString(data.source)));
      }
      for (size_t i = 0; i < data.paths.size(); ++i) {
        const std::string item = absl::StrCat("data.paths[", i, "]");
        std::string resolved = InputFile(data.paths[i], item, {item, "data.paths"});
        if (!resolved.empty()) data.paths[i] = std::move(resolved);
      }
    }
  } else if (!Bad({"data.source", "data.paths"}) && !data.paths.empty()) {
    ErrorAt("data.paths", {"data.paths"},
            "is only used when data.source is criteo_tsv or criteo_csv (data.source is "
            "synthetic); remove it");
  }
  // Epochs and shuffling are passes over finite files. The synthetic stream is endless, or a
  // range of a hash stream: more of it is a larger data.synthetic.num_samples, not a re-read.
  if (!Bad({"data.source", "data.epochs"}) && !criteo && data.epochs > 1) {
    ErrorAt("data.epochs", {"data.epochs"},
            absl::StrCat("is ", data.epochs,
                         ", but epochs are passes over finite files (data.source criteo_tsv or "
                         "criteo_csv); the synthetic source is a stream: job.steps and "
                         "data.synthetic.num_samples bound it"));
  }
  if (!Bad({"data.source", "data.shuffle"}) && !criteo && data.shuffle) {
    ErrorAt("data.shuffle", {"data.shuffle"},
            "shuffles finite files (data.source criteo_tsv or criteo_csv); the synthetic "
            "source's samples are independent draws already: remove it");
  }
}

void SpecParser::CheckFaultTolerance(JobSpec* spec) {
  const JobSection& job = spec->job;
  const ClusterSection& cluster = spec->cluster;
  FaultToleranceSection& ft = spec->fault_tolerance;
  const bool ft_ok =
      !Bad({"fault_tolerance.mode", "fault_tolerance.k", "fault_tolerance.r", "cluster.servers"});
  if (ft_ok && ft.mode == FaultToleranceMode::kErasureCode) {
    if (ft.k + ft.r > 255) {
      ErrorAt("fault_tolerance.k", {"fault_tolerance.k", "fault_tolerance.r"},
              absl::StrCat("k + r must be at most 255 (GF(2^8) codes), got k + r = ", ft.k + ft.r));
    } else if (ft.k + ft.r > cluster.servers) {
      ErrorAt("fault_tolerance.k",
              {"fault_tolerance.k", "fault_tolerance.r", "fault_tolerance.mode"},
              absl::StrCat("k + r must be at most cluster.servers (", cluster.servers,
                           ") so every stripe member is on its own server, got k + r = ", ft.k,
                           " + ", ft.r, " = ", ft.k + ft.r));
    }
  }
  if (ft_ok && ft.mode == FaultToleranceMode::kReplication && 1 + ft.r > cluster.servers) {
    ErrorAt("fault_tolerance.r", {"fault_tolerance.r", "fault_tolerance.mode"},
            absl::StrCat("replication keeps 1 + r copies on distinct servers, so 1 + r must be "
                         "at most cluster.servers (",
                         cluster.servers, "), got r = ", ft.r));
  }
  if (!Bad({"fault_tolerance.dense_replicas", "fault_tolerance.mode", "fault_tolerance.r",
            "cluster.servers"})) {
    if (ft.dense_replicas == -1) {
      ft.dense_replicas = KeepsRedundancy(ft.mode) ? std::min(ft.r, cluster.servers - 1) : 0;
    } else if (ft.dense_replicas > cluster.servers - 1) {
      ErrorAt("fault_tolerance.dense_replicas", {"fault_tolerance.dense_replicas"},
              absl::StrCat("must be between -1 and cluster.servers - 1 (", cluster.servers - 1,
                           "): each backup lives on another server, got ", ft.dense_replicas));
    }
  }
  if (ft.parity_transport == ParityTransport::kTcp && spec->security.tls.enabled() &&
      !Bad({"fault_tolerance.parity_transport"})) {
    ErrorAt("fault_tolerance.parity_transport", {"fault_tolerance.parity_transport"},
            "tcp sends parity batches unencrypted, and security.tls asks for TLS on every "
            "connection: leave it at grpc (the default) in a job with TLS");
  }
  if (ft.checkpoint.dir.empty()) ft.checkpoint.dir = job.output_dir + "/checkpoints";
  if (ft.mode == FaultToleranceMode::kCheckpoint && ft.checkpoint.interval_steps == 0 &&
      ft.checkpoint.interval_seconds == 0 &&
      !Bad({"fault_tolerance.checkpoint.interval_steps",
            "fault_tolerance.checkpoint.interval_seconds", "job.steps"})) {
    ft.checkpoint.interval_steps = std::max<int64_t>(1, job.steps / 10);
  }
}

void SpecParser::CheckFaults(const JobSpec& spec) {
  const JobSection& job = spec.job;
  const ClusterSection& cluster = spec.cluster;
  for (size_t i = 0; i < spec.faults.size(); ++i) {
    const std::string p = absl::StrCat("faults[", i, "]");
    if (Bad({p})) continue;
    const FaultSpec& f = spec.faults[i];
    if (!Bad({p + ".at_step", "job.steps"}) && (f.at_step < 1 || f.at_step > job.steps)) {
      ErrorAt(p + ".at_step", {p + ".at_step", p},
              absl::StrCat("must be between 1 and job.steps (", job.steps, "), got ", f.at_step));
    }
    if (Bad({p + ".action"})) continue;
    const bool on_server = f.action != FaultAction::kKillWorker;
    const int count = on_server ? cluster.servers : cluster.workers;
    const char* what = on_server ? "cluster.servers" : "cluster.workers";
    if (!Bad({p + ".target", on_server ? "cluster.servers" : "cluster.workers"}) &&
        (f.target < 0 || f.target >= count)) {
      ErrorAt(p + ".target", {p + ".target", p},
              absl::StrCat("must be a ", on_server ? "server" : "worker", " index between 0 and ",
                           count - 1, " (", what, " = ", count, "), got ", f.target));
    }
    if (!Bad({p + ".duration_s"})) {
      if (f.action == FaultAction::kStopServer && f.duration_s <= 0) {
        ErrorAt(p + ".duration_s", {p + ".duration_s", p},
                absl::StrCat("stop_server needs duration_s greater than 0 (seconds the server "
                             "stays stopped), got ",
                             FormatNumber(f.duration_s)));
      } else if (f.action != FaultAction::kStopServer &&
                 f.action != FaultAction::kKillCoordinator && f.duration_s != 0) {
        ErrorAt(p + ".duration_s", {p + ".duration_s", p},
                absl::StrCat("is only used by stop_server and kill_coordinator; ",
                             ToString(f.action), " is immediate (remove duration_s)"));
      }
    }
  }
}

void SpecParser::CrossCheck(JobSpec* spec) {
  CheckJob(&spec->job);
  CheckWorkerDevice(spec->cluster);
  CheckSlurm(spec->slurm);
  CheckK8s(*this, spec->k8s);
  CheckCoordinator(*this, &spec->coordinator);
  CheckTls(&spec->security.tls);
  CheckClusterAddresses(spec->cluster);
  CheckModel(spec->cluster, &spec->model);
  CheckData(spec->model, &spec->data);
  CheckFaultTolerance(spec);
  CheckFaults(*spec);
}

}  // namespace spec_internal
}  // namespace ecps
