import sys, torch
sys.path.insert(0, "."); sys.path.insert(0, "tests")
from test_variants import _model, _randn, CONV_SHAPE, BUILD_SEED
from autotune.variants import VariantSpec, build_variant
from autotune.correctness import check_variant
model, shape = _model("conv"); model = model.cuda()
built = build_variant(VariantSpec.parse("eager+cudagraphs"), model, (_randn(CONV_SHAPE, BUILD_SEED).cuda(),), device="cuda")
print("gate", check_variant(model, built, lambda s: (_randn(shape, s).cuda(),)).reason)
x = _randn(shape, 0).cuda()
with torch.inference_mode():
    o = built.fn(x).clone(); r = model(x)
print("cand-first diff", float((o - r).abs().max()))
with torch.inference_mode():
    r = model(x); o = built.fn(x)
    print("ref-first diff", float((o - r).abs().max()), "ref mode", r.is_inference(), "model training", model.training, model.bn.training)
