import torch, sys
sys.path.insert(0, ".")
from autotune.variants import VariantSpec, build_variant
from autotune.devices import backend_for
torch.manual_seed(0)
class TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1); self.bn = torch.nn.BatchNorm2d(8); self.fc = torch.nn.Linear(8, 5)
    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))
m = TinyConv().eval().cuda()
x0 = torch.randn(2,3,12,12, device="cuda"); x1 = torch.randn(2,3,12,12, device="cuda")
def check(name, fn):
    try:
        with torch.inference_mode():
            o = fn(x1).clone(); r = m(x1)
        print(name, "maxdiff", float((o-r).abs().max()), "vs-x0", float((o - m(x0)).abs().max()) if True else "")
    except Exception as e:
        print(name, "ERR", type(e).__name__, str(e)[:200])
b = backend_for("cuda")
with torch.inference_mode():
    g = b.graph_call(m, (x0,))
check("graph_call(m) under inference_mode", g)
g2 = b.graph_call(m, (x0,))
check("graph_call(m) no inference_mode", g2)
bv = build_variant(VariantSpec.parse("eager+cudagraphs"), m.cpu().cuda(), (x0,), device="cuda")
check("build_variant eager+cudagraphs", lambda x: bv.fn(*bv.prepare_inputs((x,))))
bv2 = build_variant(VariantSpec.parse("frozen+cudagraphs"), m, (x0,), device="cuda")
check("build_variant frozen+cudagraphs", lambda x: bv2.fn(*bv2.prepare_inputs((x,))))
lin = torch.nn.Linear(16, 4).cuda().eval()
with torch.inference_mode():
    gl = b.graph_call(lin, (torch.randn(2,16,device="cuda"),))
    xi = torch.randn(2,16,device="cuda"); print("linear graph maxdiff", float((gl(xi) - lin(xi)).abs().max()))
torch.backends.cudnn.enabled = False
with torch.inference_mode():
    g3 = b.graph_call(m, (x0,))
check("graph_call(m) cudnn off", g3)
torch.backends.cudnn.enabled = True
torch.manual_seed(0)
m = TinyConv().eval()
with torch.no_grad():
    m.bn.running_mean.uniform_(-0.5, 0.5); m.bn.running_var.uniform_(0.5, 2.0)
m = m.cuda()
bv = build_variant(VariantSpec.parse("eager+cudagraphs"), m, (x0,), device="cuda")
check("BN stats: build_variant eager+cudagraphs", lambda x: bv.fn(*bv.prepare_inputs((x,))))
with torch.inference_mode():
    g4 = b.graph_call(m, (x0,))
check("BN stats: graph_call(m)", g4)
import copy
mc = copy.deepcopy(m)
print("deepcopy BN buffers equal", bool((mc.bn.running_mean == m.bn.running_mean).all()), mc.training, mc.bn.training)
