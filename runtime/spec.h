// The job spec: one YAML file that describes a whole ecps job (docs/spec.md lists every key).
//
// ParseSpec validates everything before anything starts: an unknown key, a wrong type or an
// out-of-range value returns INVALID_ARGUMENT whose message names the file, the key path
// (e.g. "model.embedding_dim"), its line, and the allowed values. Defaults fill whatever
// the file leaves out, so a minimal spec is valid.
#ifndef ECPS_RUNTIME_SPEC_H_
#define ECPS_RUNTIME_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

// The spec's enumerated values. ParseSpec turns their YAML names into these once; ToString
// gives the name back (for logs, the cluster map, checkpoint manifests and SpecToYaml).
enum class FaultToleranceMode { kNone, kErasureCode, kReplication, kCheckpoint };
enum class AckPolicy { kAfterParity, kAsync };  // fault_tolerance.ack
enum class ParityTransport { kGrpc, kTcp };     // fault_tolerance.parity_transport
enum class FaultAction { kKillServer, kStopServer, kKillWorker, kKillCoordinator };  // faults[]
enum class SparseOptimizerType { kSgd, kAdagrad, kRowwiseAdagrad };
enum class DenseOptimizerType { kSgd, kAdagrad, kAdam };
enum class DataSourceType { kSynthetic, kCriteoTsv, kCriteoCsv };
enum class PoolingType { kSum, kMean };
enum class WorkerDevice { kCpu, kCuda };  // cluster.worker_device
enum class StateStoreType { kFile, kEtcd };  // coordinator.state_store
enum class AbftSetting { kOff, kDetect, kAuto };  // worker.abft (docs/abft.md)

const char* ToString(FaultToleranceMode mode);  // "none", "erasure_code", ...
const char* ToString(AckPolicy ack);            // "after_parity", "async"
const char* ToString(ParityTransport transport);  // "grpc", "tcp"
const char* ToString(FaultAction action);  // "kill_server", "stop_server", ...
const char* ToString(SparseOptimizerType type);
const char* ToString(DenseOptimizerType type);
const char* ToString(DataSourceType source);  // "synthetic", "criteo_tsv", "criteo_csv"
const char* ToString(PoolingType pooling);    // "sum", "mean"
const char* ToString(WorkerDevice device);    // "cpu", "cuda"
const char* ToString(StateStoreType store);   // "file", "etcd"
const char* ToString(AbftSetting abft);       // "off", "detect", "auto"
// Whether this ecps was built with the CUDA toolkit (the GPU worker plugin exists).
bool BuiltWithCuda();

// Modes that keep redundancy on other servers (parity or replicas), so a lost server can be
// rebuilt from its peers.
inline bool KeepsRedundancy(FaultToleranceMode mode) {
  return mode == FaultToleranceMode::kErasureCode || mode == FaultToleranceMode::kReplication;
}

struct JobSection {
  std::string name = "ecps-job";
  std::string output_dir;        // default: runs/<name>
  int64_t steps = 1000;          // training steps per worker
  int64_t eval_every = 0;        // steps between held-out evaluations (0: only at the end)
  int64_t eval_samples = 8192;   // size of the held-out split
  uint64_t seed = 42;
  std::string token;             // job token; empty: `ecps run` generates a random one
  std::string resume_from;       // checkpoint directory to resume from (empty: none)
  bool synchronous = false;      // workers step in lockstep (used by equivalence tests)
};

struct ClusterSection {
  int servers = 2;
  int spares = 0;
  int workers = 1;
  // The address every role binds. Empty: 127.0.0.1 for `ecps run` (a job on one machine
  // stays on loopback), 0.0.0.0 for single roles and Slurm steps.
  std::string host;
  // What roles advertise (peers dial it). Empty: the bound host, or for 0.0.0.0 this
  // host's first non-loopback IPv4 address (runtime/net.h). One value for every role, so
  // useful only when all run on one host; per process, --advertise.
  std::string advertise;
  int coordinator_port = 0;          // 0: pick a free port
  std::string coordinator;           // host:port the roles dial (--coordinator and
                                     // $ECPS_COORDINATOR take precedence)
  int connect_timeout_s = 300;       // how long a role keeps trying to reach the coordinator
  // How long a running server or worker goes on without an answer from the coordinator
  // before it stops (runtime/coordinator_grace.h).
  int coordinator_grace_s = 300;
  int heartbeat_interval_ms = 200;
  int heartbeat_timeout_ms = 1500;
  int rpc_timeout_ms = 10000;
  int worker_threads = 1;            // compute threads per worker (OpenBLAS)
  // Where a worker's dense math runs: the CPU, or the GPUs of its machine (the plugin
  // libecps_gpu.so; docs/gpu.md). gpus_per_worker > 1 splits each batch across that many GPUs
  // and sums the gradients with NCCL.
  WorkerDevice worker_device = WorkerDevice::kCpu;
  int gpus_per_worker = 1;
  int server_threads = 2;            // gRPC handler threads per server
  // A server refuses (RESOURCE_EXHAUSTED, before any work) a request naming more row ids than
  // this, or whose reply would exceed max_reply_mb (below gRPC's 256 MiB message limit).
  int max_request_ids = 4 << 20;
  int max_reply_mb = 128;
};

// coordinator: where the coordinator keeps its durable state, and its standbys
// (docs/recovery.md, "Standby coordinators").
struct CoordinatorSection {
  // Coordinator processes: one active, the others standbys that take over when its lease in
  // etcd lapses. Above 1 only with state_store etcd.
  int replicas = 1;
  StateStoreType state_store = StateStoreType::kFile;  // file: the state log (--state-dir)
  std::vector<std::string> etcd_endpoints;            // host:port of each etcd member
  std::string etcd_prefix = "/ecps/";                 // the job's keys: PREFIX<job.name>/...
  int lease_ttl_s = 2;                                // the active coordinator's lease
};

struct ModelSection {
  int num_dense = 13;
  int num_sparse = 26;
  int embedding_dim = 16;
  std::vector<int64_t> table_rows;   // one per sparse feature; a scalar in YAML repeats
  std::vector<int> bottom_mlp = {64, 16};   // last must equal embedding_dim
  std::vector<int> top_mlp = {64, 32};      // hidden sizes; the output layer (1) is implied
  PoolingType pooling = PoolingType::kSum;
};

struct SparseOptimizer {
  SparseOptimizerType type = SparseOptimizerType::kAdagrad;
  float lr = 0.05f;
  float eps = 1e-8f;
  float initial_accumulator = 0.0f;
};

struct DenseOptimizer {
  DenseOptimizerType type = DenseOptimizerType::kAdam;
  float lr = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

struct OptimizerSection {
  SparseOptimizer sparse;
  DenseOptimizer dense;
};

struct SyntheticData {
  int64_t num_samples = 0;           // 0: endless (steps bound the job)
  double zipf_s = 1.05;              // Zipf exponent of sparse ids
  uint64_t hidden_seed = 7;          // seed of the hidden labelling model
  double label_noise = 0.1;          // probability mass of noise in the hidden model
};

struct DataSection {
  DataSourceType source = DataSourceType::kSynthetic;
  std::vector<std::string> paths;    // input files for criteo_* (relative to the spec file)
  int batch_size = 512;
  double eval_fraction = 0.05;       // criteo_*: share of rows held out for evaluation
  int64_t max_bad_lines = 100;       // malformed lines tolerated before the job fails
  int64_t epochs = 1;                // criteo_*: passes over the training split
  bool shuffle = false;              // criteo_*: a seeded order per epoch (blocks, then lines)
  int64_t shuffle_block_lines = 65536;  // data lines per shuffled block (what one block holds)
  SyntheticData synthetic;
};

struct CheckpointSection {
  std::string dir;                   // default: <output_dir>/checkpoints
  int64_t interval_steps = 0;        // 0: not by steps
  double interval_seconds = 0;       // 0: not by time
  bool save_final = true;
  int keep = 3;                      // committed checkpoints kept in dir (>= 1)
  // The mean time between failures of one node, for the Young/Daly checkpoint interval that
  // `ecps bench recovery` compares erasure coding against (docs/scaling.md).
  double node_mtbf_hours = 6300;
};

// The online scrub (ps/online_scrub.h, docs/abft.md): while training runs, each parity holder
// checks its stripes against their data rows, and each dense replica against its primary.
struct ScrubSection {
  double interval_s = 600;   // a full pass at most this often; 0: off
  double rate_mb_s = 8;      // bytes read per second cap (MB/s), per server
};

struct FaultToleranceSection {
  FaultToleranceMode mode = FaultToleranceMode::kNone;
  int k = 4;
  int r = 1;
  AckPolicy ack = AckPolicy::kAfterParity;
  int async_window = 4096;           // unacknowledged deltas per server pair (async)
  int async_linger_ms = 0;           // async: how long deltas may wait to share a batch
  ParityTransport parity_transport = ParityTransport::kGrpc;  // how parity batches travel
  int dense_replicas = -1;           // -1: r
  std::string codec_backend = "auto";
  double rebuild_rate_mb_s = 0;      // background rebuild rate limit; 0: unlimited
  CheckpointSection checkpoint;
  ScrubSection scrub;                // erasure_code and replication only
};

struct FaultSpec {
  int64_t at_step = 0;
  FaultAction action = FaultAction::kKillServer;  // a required key: no default in a spec
  int target = 0;                    // server or worker index
  double duration_s = 0;             // stop_server: how long the process stays stopped;
                                     // kill_coordinator: how long it stays down
};

struct MonitoringSection {
  bool progress = true;              // one live progress line on the terminal
  int metrics_interval_ms = 1000;    // metrics timeline resolution
  int report_every_steps = 10;       // worker progress reports to the coordinator
  std::string log_level = "info";
  // The port every role serves Prometheus' /metrics on (HTTP, on cluster.host's address).
  // 0: a free port each (roles of `ecps run` share a host; `ecps k8s` uses 9400); -1: none.
  int metrics_port = 0;
};

// `ecps slurm`: the sbatch options of the job it writes (docs/deploy.md).
struct SlurmSection {
  std::string partition;                    // empty: the cluster's default partition
  int nodes = 1;                            // nodes of the allocation; roles spread over them
  std::string time;                         // time limit (sbatch --time); empty: the default
  std::string account;                      // empty: the user's default account
  std::vector<std::string> sbatch_options;  // more #SBATCH lines, e.g. "--mem=8G"
  std::string binary;                       // ecps on the nodes; empty: the one writing it
};

// `ecps k8s`: the Kubernetes objects it writes (docs/deploy.md, "On Kubernetes"). Quantities
// are Kubernetes' ("2", "500m", "8Gi"); a CPU figure is the pod's request, a memory figure
// its request and limit; empty: none.
struct K8sSection {
  std::string namespace_name = "default";        // key `namespace`
  std::string image;                             // holds `ecps` on its PATH; required there
  std::string image_pull_policy = "IfNotPresent";  // IfNotPresent | Always | Never
  std::string service_account;                   // empty: the namespace's default
  std::string coordinator_cpu = "500m";
  std::string coordinator_memory = "1Gi";
  std::string server_cpu = "2";
  std::string server_memory = "4Gi";
  std::string worker_cpu = "2";
  std::string worker_memory = "4Gi";
  // A PersistentVolumeClaim mounted at fault_tolerance.checkpoint.dir in the coordinator's and
  // the servers' pods; empty: an emptyDir each, so no checkpoint can be written.
  std::string checkpoint_claim;
  std::vector<std::string> node_selector;        // "key=value" labels every pod's node needs
};

// security.tls (docs/security.md): mutual TLS on every connection. Each role's certificate
// has the role as its subject CN and chains to `ca`; relative paths are resolved against the
// spec file's folder. Empty `ca`: plaintext, roles from per-role tokens.
struct TlsPair {
  std::string cert;
  std::string key;
};
struct TlsSection {
  std::string ca;
  TlsPair coordinator;
  TlsPair server;   // the servers and the spares
  TlsPair worker;
  TlsPair admin;    // the operator commands and `ecps run`'s launcher
  bool enabled() const { return !ca.empty(); }
};
struct SecuritySection {
  TlsSection tls;
};

// The worker's own behaviour.
struct WorkerSection {
  // Checksums on the MLP's GEMMs (docs/abft.md): off; detect (every GEMM, global checksum);
  // auto (each GEMM's scheme picked from its arithmetic intensity and the machine's balance).
  // A failed check recomputes the step; its gradients are never pushed.
  AbftSetting abft = AbftSetting::kOff;
  // A worker whose steps were computed again this many times within its last
  // kAbftDetectionWindow steps (or one step that failed its checks every time) computes
  // wrongly: it stops and is replaced like a dead worker. 0: never.
  int abft_max_detections = 3;
  static constexpr int64_t kAbftDetectionWindow = 1000;
};

struct JobSpec {
  std::string path;                  // file it came from ("" for a string)
  JobSection job;
  ClusterSection cluster;
  WorkerSection worker;
  CoordinatorSection coordinator;
  ModelSection model;
  OptimizerSection optimizer;
  DataSection data;
  FaultToleranceSection fault_tolerance;
  std::vector<FaultSpec> faults;
  MonitoringSection monitoring;
  SlurmSection slurm;
  K8sSection k8s;
  SecuritySection security;
};

// Parses and validates a spec. `source_name` is used in error messages ("spec.yaml:12: ...").
absl::StatusOr<JobSpec> ParseSpec(const std::string& yaml_text,
                                  const std::string& source_name = "<spec>");

// Reads `path` and parses it; relative data paths are resolved against the file's folder.
absl::StatusOr<JobSpec> LoadSpecFile(const std::string& path);

// Renders a spec back to YAML (every key, defaults included); ParseSpec(SpecToYaml(s))
// yields an equal spec. Used to pass the exact spec to child processes.
std::string SpecToYaml(const JobSpec& spec);

// Every key the spec knows, as paths from the top ("job.name", "optimizer.sparse.lr",
// "faults[].at_step"), in the order SpecToYaml writes them; from the same field tables that
// read and render the spec (docs/spec.md must list each).
std::vector<std::string> SpecKeyPaths();

}  // namespace ecps

#endif  // ECPS_RUNTIME_SPEC_H_
