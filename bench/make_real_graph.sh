#!/bin/sh
# The real 30-40K-operator graph of issue 16 (bench/results_scale.md, "goal runs"): the training
# step (forward, backward, Adam) of ResNet-1001 (He et al. 2016, pre-activation bottleneck blocks,
# CIFAR-10 shapes, batch 64), built from code in tests/torch_models.py (random weights, no
# downloads), captured at ATen level, roofline times on the H100 SXM5 spec, K = 4 devices of the
# spec's 80 GB: 37,725 operators, 66,437 edges, about 45 s. Run from the repository root:
#     sh bench/make_real_graph.sh [OUT.json]
# then, e.g.  python3 bench/bench_scale.py solve OUT.json --time-limit 600 [--memory-model peak --memory 4GB]
set -e
python3 -m placement.importers.torch tests/torch_models.py:resnet1001 -o "${1:-/tmp/resnet1001.json}" \
    --cost roofline --device-spec h100 --devices 4
