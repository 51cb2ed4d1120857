"""The PyTorch peer of batchsweep: the same model, sweep and report, measured with PyTorch.

Everything but torch_model.py and torch_runner.py is standard-library Python, so configs, the batch grammar,
parameter and FLOP counting, statistics, the stopping rule and the report can be used and tested without torch.
"""

PEER_NAME = "batchsweep-torch-peer"
