"""A Jepsen/Elle-style history of client operations and a checker for it.

Independent of the code under test on purpose: the checker imports nothing from
pulsar_txn and classifies nothing the way the product does. It knows only what the
client saw (invocations, completions, values read) and infers every transaction's
fate from those observations, so a bug in the product's classifier cannot hide in
the checker too.
"""

from .checker import Anomaly, check
from .model import History, Op

__all__ = ["Anomaly", "History", "Op", "check"]
