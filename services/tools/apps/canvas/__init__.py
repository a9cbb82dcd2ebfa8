"""Mock Canvas LMS: Canvas's REST shape under ``/worlds/{world}/canvas/api/v1`` (``canvasapi``'s base URL
is ``/worlds/{world}/canvas``)."""
