"""hami-awsneuron: the AWS Neuron backend of hami (entry point ``awsneuron``).

Vendor key ``AWSNeuron``; resources ``aws.amazon.com/neuron`` (whole devices) and
``aws.amazon.com/neuroncore`` (NeuronCores); inventory from the node's capacity as the
Neuron device plugin advertises it; several devices only as a contiguous range
(PROTOCOL.md §1b, HAMi 2.10 ``pkg/device/awsneuron/device.go``).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hami-awsneuron")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"

BACKEND_NAME = "awsneuron"
VENDOR = "AWSNeuron"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
