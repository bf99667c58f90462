#!/usr/bin/env bash
# Run nodecert's GPU validators for real on a GPU machine and record what they saw.
#
#   OUT=/some/dir bash benchmarks/device_record.sh [BURNIN_S] [SOAK_S] [DTYPE_S]
#   CHECKS="fabric.bandwidth fabric.nccl_allreduce" ... picks the runner's checks;
#   DTYPE_S=0 skips the per-dtype GEMM runs.
#
# Records raw tool outputs (nvidia-smi -q / -q -x / --query-gpu, topo, nvlink,
# lspci, dmesg) and runs the node runner with a plan for the checks that need a
# GPU (hardware, health, stack.framework_smoke, load.burnin, load.thermal_soak),
# plus the GEMM worker once per extra dtype. The machine's own python3 (with its
# PyTorch) plays the stack's framework environment. Everything lands in
# $OUT/recorded.tar.gz (tests/fixtures/recorded/ is made from it) and $OUT/log.txt.
# Every step has its own time limit; a step that fails is logged and the rest run.
set -u
BURNIN_S=${1:-60}
SOAK_S=${2:-60}
DTYPE_S=${3:-20}
OUT=${OUT:?set OUT to the output folder}
R=$(mktemp -d)/recorded
mkdir -p "$R/smi" "$R/gemm" "$R/run"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:$PWD/validators"
log() { echo "== $(date -u +%H:%M:%S) $*"; }
rec() {  # rec FILE TIMEOUT CMD...: stdout+stderr to FILE, exit status appended to the log
  local f=$1 t=$2; shift 2
  timeout "$t" "$@" >"$f" 2>&1; echo "   $* -> rc=$? ($(wc -c <"$f") bytes)"
}
{
log "tools"
rec "$R/smi/nvidia-smi-q.txt" 60 nvidia-smi -q
rec "$R/smi/nvidia-smi-q.xml" 60 nvidia-smi -q -x
rec "$R/smi/nvidia-smi-L.txt" 30 nvidia-smi -L
rec "$R/smi/nvidia-smi.txt" 30 nvidia-smi
rec "$R/smi/topo-m.txt" 30 nvidia-smi topo -m
rec "$R/smi/nvlink-s.txt" 30 nvidia-smi nvlink -s
rec "$R/smi/lspci-nn-D.txt" 30 lspci -nn -D
rec "$R/smi/dmesg.txt" 30 dmesg
rec "$R/smi/versions.txt" 120 python3 -c "import torch, platform; print(platform.python_version(), torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.nccl.version(), torch.cuda.get_device_name(0))"
log "plan"
CHECKS=${CHECKS:-hardware.inventory hardware.pcie hardware.topology health.gpu health.xid stack.framework_smoke load.burnin load.thermal_soak} \
python3 - "$R/run/plan.json" "$BURNIN_S" "$SOAK_S" <<'EOF'
import json, os, shutil, sys
import torch
from nodecert.profiles import thresholds
out, burn, soak = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plan = {
    "schema": "nodecert.plan/v1", "run_id": "device-record", "host": "h200-device",
    "suite": "device", "checks": os.environ["CHECKS"].split(),
    "check_timeout_s": max(burn, soak) + 300, "tool_timeout_s": 60,
    "simulated": False,
    "spec": {"gpu_model": "H200-SXM", "gpu_count": 1, "cpu_cores": 16, "ram_gb": 128,
             "nvme_count": 0, "nvme_min_gb": 0},
    "thresholds": thresholds.resolve("H200-SXM", inventory=None, cli={}, host="h200-device"),
    "options": {"fabric": {"nccl_max_size": "1G", "nccl_iters": 20, "timeout_s": 300},
                "load": {"burnin_s": burn, "soak_s": soak, "engine": "torch", "dtype": "bf16",
                         "gemm_size": 8192, "smoke_steps": 30, "report_s": 5}},
    # No provisioned stack here: the machine's own python3 + torch stands in for it.
    "framework": {"python": shutil.which("python3"), "torch": torch.__version__,
                  "torch_cuda": torch.version.cuda, "tensorflow": "", "tensorflow_cuda": "",
                  "cudnn": "9.12.0.46", "nccl": "2.27.7-1+cuda13.0"},
}
json.dump(plan, open(out, "w"), indent=1)
print("plan written:", plan["checks"])
EOF
log "node runner (burn-in ${BURNIN_S}s, soak ${SOAK_S}s)"
(cd validators && timeout $((BURNIN_S + SOAK_S + 400)) python3 -m nodecert_node run \
   --plan "$R/run/plan.json" >"$R/run/events.jsonl" 2>"$R/run/stderr.txt"); echo "   runner rc=$?"
python3 - "$R/run/events.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    ev = json.loads(line)
    if ev["event"] == "result":
        r = ev["result"]
        print(f"   {r['check']:24} {r['verdict']:5} {r['summary'][:150]}")
        if r["check"] in ("load.burnin", "load.thermal_soak", "stack.framework_smoke"):
            print("     value:", json.dumps(r["value"])[:400])
EOF
[ "$DTYPE_S" -gt 0 ] && for dt in fp16 tf32 fp8 bf16; do
  log "gemm worker $dt ${DTYPE_S}s"
  rec "$R/gemm/gemm-$dt.jsonl" $((DTYPE_S + 120)) python3 validators/nodecert_node/workers/gemm.py \
      --device 0 --dtype "$dt" --size 8192 --seconds "$DTYPE_S" --report-s 2
  grep '"done"' "$R/gemm/gemm-$dt.jsonl" | cut -c1-300
done
log "copy bandwidth worker (4 GiB)"
rec "$R/gemm/copy-4g.jsonl" 120 python3 validators/nodecert_node/workers/collective.py copy --bytes 4G
cat "$R/gemm/copy-4g.jsonl" | grep -v '^/'
[ "$DTYPE_S" -gt 0 ] || exit 0
log "gemm worker bf16 with an injected fault (the comparison must catch it)"
rec "$R/gemm/gemm-bf16-injected.jsonl" 120 python3 validators/nodecert_node/workers/gemm.py \
    --device 0 --dtype bf16 --size 8192 --seconds 5 --report-s 1 --inject-fault 100
grep -c '"mismatch"' "$R/gemm/gemm-bf16-injected.jsonl"
log "telemetry while idle"
rec "$R/smi/query-gpu-idle.csv" 20 nvidia-smi --query-gpu=index,temperature.gpu,temperature.gpu.tlimit,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits -lms 1000 -c 1
log "end"
} 2>&1 | tee "$OUT/log.txt"
tar -C "$(dirname "$R")" -czf "$OUT/recorded.tar.gz" recorded
ls -la "$OUT"
