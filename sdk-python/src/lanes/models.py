"""The wire models generated from ``openapi.yaml``: ``from lanes.models import QueueDetail``.

Admin and status results are these models. They are generated into ``lanes._generated``, whose
path is not public; this module is their public name.
"""

from lanes._generated.models import *  # noqa: F403
