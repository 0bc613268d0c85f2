#!/bin/sh
# The real 30-40K-operator graph of issue 16 (bench/results_scale.md, "goal runs"): the training
# step (forward, backward, Adam) of ResNet-1001 (He et al. 2016, pre-activation bottleneck blocks,
# CIFAR-10 shapes, batch 64), built from code in tests/torch_models.py (random weights, no
# downloads), captured at ATen level, roofline times on the H100 SXM5 spec, K = 4 devices of the
# spec's 80 GB: 37,725 operators, 66,437 edges, about 45 s. Run from the repository root:
#     sh bench/make_real_graph.sh [OUT.json]
# then, e.g.  python3 bench/bench_scale.py solve OUT.json --time-limit 600 [--memory-model peak --memory 4GB]
# The peak row of results_scale.md also ran a copy without operator semantics (so auto skips Tofu):
#     python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [n.pop(k,None) for n in d['nodes'] for k in ('op','inputs','outputs')]; [e.pop(k,None) for e in d['edges'] for k in ('src_output','dst_inputs','tensors')]; json.dump(d,open(sys.argv[2],'w'))" OUT.json OUT_nometa.json
set -e
python3 -m placement.importers.torch tests/torch_models.py:resnet1001 -o "${1:-/tmp/resnet1001.json}" \
    --cost roofline --device-spec h100 --devices 4
