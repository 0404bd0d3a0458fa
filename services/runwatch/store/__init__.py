"""runwatch's store service; it needs the 'store' extra.

``pip install 'runwatch[store]'``; importing it without raises one clear
:class:`runwatch.extras.MissingExtraError`.
"""

from runwatch.extras import require

require("store")
