"""The run's Adam (distgnn/run/optimizer.py) against torch.optim.Adam, its reference."""
import subprocess
import sys

import torch

from distgnn.run.optimizer import Adam


def two_models(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    twin.load_state_dict(model.state_dict())
    return model, twin


def train(model, optimizer, steps, x, y):
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def test_adam_takes_torchs_steps_bit_for_bit_and_shares_its_state_dict():
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    ours_model, torch_model = two_models()
    ours = Adam(ours_model.parameters(), lr=0.01, weight_decay=5e-4)
    theirs = torch.optim.Adam(torch_model.parameters(), lr=0.01, weight_decay=5e-4)
    train(ours_model, ours, 7, x, y)
    train(torch_model, theirs, 7, x, y)
    for a, b in zip(ours_model.parameters(), torch_model.parameters()):
        assert torch.equal(a, b)
        assert a.grad is None or torch.equal(a.grad, b.grad)
    state = ours.state_dict()
    assert state["param_groups"] == theirs.state_dict()["param_groups"]
    # a state from either loads into the other, and the next steps agree again
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(state)
    train(ours_model, ours, 3, x, y)
    train(torch_model, theirs, 3, x, y)
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(),
                                                 torch_model.parameters()))


def test_a_step_records_no_autograd_graph_and_keeps_the_hooks():
    model, _ = two_models()
    optimizer = Adam(model.parameters(), lr=0.1)
    called = []
    optimizer.register_step_post_hook(lambda opt, args, kwargs: called.append(opt))
    model(torch.randn(2, 5)).sum().backward()
    optimizer.step()
    assert called == [optimizer]
    assert all(p.grad_fn is None for p in model.parameters())


def test_training_does_not_import_torch_dynamo():
    """The import this optimizer avoids (1.2-1.4 s of every rank's start-up) stays out of a
    run that trains, checkpoints and resumes."""
    code = ("import sys, tempfile\n"
            "from distgnn.cli.train import train_main\n"
            "d = tempfile.mkdtemp()\n"
            "flags = ['--epochs', '2', '--no-progress', '--threads', '1']\n"
            "assert train_main(flags + ['--checkpoint-dir', d]) == 0\n"
            "assert train_main(flags + ['--resume', d, '--epochs', '3']) == 0\n"
            "print('torch._dynamo' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "False"
