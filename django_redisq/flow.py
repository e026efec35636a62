"""Where the workflow vocabulary was before workflows had a package: ``from django_redisq.flow import chain`` keeps working.

Its home is ``django_redisq.workflows.canvas``; this module only keeps the path earlier releases documented.
"""

from django_redisq.workflows.canvas import (
    MARKER,
    MAX_DEPTH,
    MAX_STEPS,
    Chain,
    Chord,
    Group,
    InvalidWorkflow,
    Node,
    Signature,
    Step,
    chain,
    check_depth,
    chord,
    compile_flow,
    error_id,
    group,
    markers,
    parse_step_id,
    release_call,
    step_id,
)

__all__ = [
    'MARKER', 'MAX_DEPTH', 'MAX_STEPS', 'Chain', 'Chord', 'Group', 'InvalidWorkflow', 'Node', 'Signature',
    'Step', 'chain', 'check_depth', 'chord', 'compile_flow', 'error_id', 'group', 'markers', 'parse_step_id',
    'release_call', 'step_id',
]
