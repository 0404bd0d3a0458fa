"""runwatch's pager service; it needs the 'pager' extra.

``pip install 'runwatch[pager]'``; importing it without raises one clear
:class:`runwatch.extras.MissingExtraError`.
"""

from runwatch.extras import require

require("pager")
