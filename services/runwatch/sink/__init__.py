"""runwatch's sink service; it needs the 'sink' extra.

``pip install 'runwatch[sink]'``; importing it without raises one clear
:class:`runwatch.extras.MissingExtraError`.
"""

from runwatch.extras import require

require("sink")
