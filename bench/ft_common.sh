# Shared by bench/ft_modes.sh and bench/ft_cost.sh (sourced): the configurations and their
# filter, the base spec, and starting a job, pinned when ECPS_PIN asks for it. Expects `spec`,
# `servers` and `ecps`.

# "name|fault_tolerance body" of every configuration the benchmarks compare.
configs=("none|mode: none"
  "ec41-after_parity|mode: erasure_code, k: 4, r: 1, ack: after_parity"
  "ec41-async|mode: erasure_code, k: 4, r: 1, ack: async"
  "ec41-tcp|mode: erasure_code, k: 4, r: 1, ack: after_parity, parity_transport: tcp"
  "ec41-async-tcp|mode: erasure_code, k: 4, r: 1, ack: async, parity_transport: tcp"
  "ec42-after_parity|mode: erasure_code, k: 4, r: 2, ack: after_parity"
  "ec42-async|mode: erasure_code, k: 4, r: 2, ack: async"
  "ec42-tcp|mode: erasure_code, k: 4, r: 2, ack: after_parity, parity_transport: tcp"
  "rep1-after_parity|mode: replication, r: 1, ack: after_parity"
  "rep1-async|mode: replication, r: 1, ack: async"
  "rep1-tcp|mode: replication, r: 1, ack: after_parity, parity_transport: tcp"
  "rep2-after_parity|mode: replication, r: 2, ack: after_parity"
  "rep2-async|mode: replication, r: 2, ack: async"
  # The online scrub (docs/abft.md) at its default rate, scrubbing back to back (a pass at
  # most every second), against the same code with the scrub off.
  "ec42-scrub-off|mode: erasure_code, k: 4, r: 2, ack: after_parity, scrub: {interval_s: 0}"
  "ec42-scrub-on|mode: erasure_code, k: 4, r: 2, ack: after_parity, scrub: {interval_s: 1}")

# ECPS_MODES="none ec41-async ..." keeps only those configurations (none always runs).
ft_filter_configs() {
  [[ -n "${ECPS_MODES:-}" ]] || return 0
  local kept=() c name
  for c in "${configs[@]}"; do
    name="${c%%|*}"
    if [[ "$name" == none || " $ECPS_MODES " == *" $name "* ]]; then kept+=("$c"); fi
  done
  configs=("${kept[@]}")
}

# ECPS_PIN="WORKER_CPUS SERVER_CPUS" (taskset lists, e.g. "0 1"): the coordinator and the
# servers run on SERVER_CPUS, and every thread of each worker moves onto WORKER_CPUS as soon as
# it starts. Sets `launch` (what every job starts under) and `worker_cpus`.
worker_cpus="" server_cpus=""
launch=()
ft_setup_pinning() {
  [[ -n "${ECPS_PIN:-}" ]] || return 0
  read -r worker_cpus server_cpus <<<"$ECPS_PIN"
  if [[ -z "$worker_cpus" || -z "$server_cpus" ]] || ! command -v taskset >/dev/null; then
    echo "ECPS_PIN needs two CPU lists, e.g. ECPS_PIN=\"0 1\", and taskset (util-linux)" >&2
    exit 2
  fi
  launch=(taskset -c "$server_cpus")
  workers="$(awk '/^  workers:/ {print $2}' "$spec")"
  workers="${workers:-1}"
  echo "pinned: worker on CPUs $worker_cpus, coordinator and servers on CPUs $server_cpus" >&2
}

# The spec without its fault_tolerance section and with the server count replaced, into $1.
ft_base_spec() {
  awk -v servers="$servers" '
    /^fault_tolerance:/ {skip=1; next}
    /^[a-z_]+:/ {skip=0}
    skip {next}
    /^  servers:/ {print "  servers: " servers; next}
    {print}' "$spec" >"$1"
}

# Starts one job (spec, output folder, stderr file) in the background, its pid in `ft_job`;
# when pinned, moves its workers, once all have started, onto the worker CPUs (the threads
# they start later inherit that).
ft_start_job() {
  "${launch[@]}" "$ecps" run "$1" --output "$2" --no-progress >/dev/null 2>"$3" &
  ft_job=$!
  local pids="" pid
  if [[ -n "$worker_cpus" ]]; then
    # The workers are the processes started with this run's resolved spec and role "worker"
    # (whatever the binary is called: ECPS_BIN may name a copy).
    while (($(wc -w <<<"$pids") < workers)) && kill -0 "$ft_job" 2>/dev/null; do
      sleep 0.05
      pids="$(pgrep -f -- " worker --spec $2/" || true)"
    done
    for pid in $pids; do
      taskset -a -p -c "$worker_cpus" "$pid" >/dev/null || echo "could not pin worker $pid" >&2
    done
  fi
}
