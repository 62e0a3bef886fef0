"""Everything that differs between SGLang and vLLM, and between their releases, and nothing else.

Inside draftlab one convention holds: aux layer k (0-based) is the OUTPUT of target decoder layer
k, before the final norm. The engines translate at this edge: ``releases.py`` holds what each
release reads from a drafter (classes, variant flags and where, aux-id rules), ``aux_ids.py`` turns
a drafter's ids into the layers a release captures and back, ``loading.py`` what an engine binds.
"""

from draftlab.engines.aux_ids import (
    AUX_FIELDS,
    ENGINES,
    NATIVE_ENGINE,
    AuxLayers,
    aux_field,
    aux_layers,
    capturable,
    configured_aux_layers,
    default_aux_layers,
    first_nameable,
    intended_aux_layers,
    written_aux_ids,
)

__all__ = ["AUX_FIELDS", "ENGINES", "NATIVE_ENGINE", "AuxLayers", "aux_field", "aux_layers", "capturable",
           "configured_aux_layers", "default_aux_layers", "first_nameable", "intended_aux_layers", "written_aux_ids"]
