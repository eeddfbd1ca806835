"""Training methods that plug into the one trainer, and their registry.

Adding a method = its module (a :class:`Method` and its config dataclass) + one line in
:data:`METHODS` (its config section ``method.<name>`` and its name choice follow) + its YAML.
"""

from dataclasses import dataclass

from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.method import Method
from ugncl.methods.decl import DECLConfig, DECLMethod
from ugncl.methods.infonce_method import InfoNCEConfig, InfoNCEMethod
from ugncl.methods.ncr.method import NCRConfig, NCRMethod
from ugncl.methods.triplet import TripletConfig, TripletMethod
from ugncl.methods.ugncl.method import UGNCLConfig, UGNCLMethod
from ugncl.methods.weighted.npc import NPCConfig, NPCMethod
from ugncl.methods.weighted.osa import OSAConfig, OSAMethod
from ugncl.methods.weighted.sdd import SDDConfig, SDDMethod


@dataclass(frozen=True)
class MethodSpec:
    """A method: its config section (a dataclass; may declare ``CHOICES: ClassVar[dict]``)
    and its class, constructed with the section's fields and ``eval_score``."""

    config: type
    cls: type[Method]


METHODS: dict[str, MethodSpec] = {
    "ugncl": MethodSpec(UGNCLConfig, UGNCLMethod),
    "triplet": MethodSpec(TripletConfig, TripletMethod),
    "infonce": MethodSpec(InfoNCEConfig, InfoNCEMethod),
    "npc": MethodSpec(NPCConfig, NPCMethod),
    "sdd": MethodSpec(SDDConfig, SDDMethod),
    "osa": MethodSpec(OSAConfig, OSAMethod),
    "decl": MethodSpec(DECLConfig, DECLMethod),
    "ncr": MethodSpec(NCRConfig, NCRMethod),
}

__all__ = [
    "METHODS",
    "DECLConfig",
    "DECLMethod",
    "InfoNCEConfig",
    "InfoNCEMethod",
    "Method",
    "MethodContext",
    "MethodSpec",
    "NCRConfig",
    "NCRMethod",
    "NPCConfig",
    "NPCMethod",
    "OSAConfig",
    "OSAMethod",
    "SDDConfig",
    "SDDMethod",
    "StepContext",
    "TripletConfig",
    "TripletMethod",
    "UGNCLConfig",
    "UGNCLMethod",
]
