"""runwatch's processor service; it needs the 'processor' extra.

``pip install 'runwatch[processor]'``; importing it without raises one clear
:class:`runwatch.extras.MissingExtraError`.
"""

from runwatch.extras import require

require("processor")
