"""hami-awsneuron: the AWS Neuron backend of hami (entry point ``awsneuron``).

Vendor key ``AWSNeuron``; resources ``aws.amazon.com/neuron`` (whole devices) and
``aws.amazon.com/neuroncore`` (NeuronCores); inventory from the node's capacity as the
Neuron device plugin advertises it; several devices only as a contiguous range
(PROTOCOL.md §1b, HAMi 2.10 ``pkg/device/awsneuron/device.go``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-awsneuron")

BACKEND_NAME = "awsneuron"
VENDOR = "AWSNeuron"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
