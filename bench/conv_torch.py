"""PyTorch side of opreg_bench_conv: conv2d forward + backward (input, weight) on
ResNet-18's layer shapes, and training steps of torchvision's resnet18, f32, timed the
same way as the C side (median of REPS steps after one warm-up).
Usage: conv_torch.py THREADS REPS BATCH IMAGE. Prints NAME MS lines."""
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(sys.argv[1])

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

threads, reps, batch, image = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(0)


def median_ms(fn):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return 1e3 * ts[len(ts) // 2]


# name, C_in, C_out, k, stride, padding, input size (at 224)
LAYERS = [
    ("conv1", 3, 64, 7, 2, 3, 224), ("layer1", 64, 64, 3, 1, 1, 56), ("layer2.down", 64, 128, 3, 2, 1, 56),
    ("layer2", 128, 128, 3, 1, 1, 28), ("layer3.down", 128, 256, 3, 2, 1, 28), ("layer3", 256, 256, 3, 1, 1, 14),
    ("layer4.down", 256, 512, 3, 2, 1, 14), ("layer4", 512, 512, 3, 1, 1, 7), ("proj4", 256, 512, 1, 2, 0, 14),
]
for name, cin, cout, k, s, p, hw in LAYERS:
    x = torch.rand(batch, cin, hw, hw, requires_grad=True)
    w = (torch.rand(cout, cin, k, k) - 0.5).requires_grad_(True)

    def step():
        y = F.conv2d(x, w, None, s, p)
        torch.autograd.grad(y, (x, w), torch.ones_like(y))

    print("conv_%s %.6f" % (name, median_ms(step)))

try:
    from torchvision.models import resnet18
except ImportError:
    sys.exit(0)
m = resnet18(num_classes=4)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.rand(batch, 3, image, image)
y = torch.randint(0, 4, (batch,))


def train_step():
    loss = F.cross_entropy(m(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


print("resnet18_step %.6f" % median_ms(train_step))
