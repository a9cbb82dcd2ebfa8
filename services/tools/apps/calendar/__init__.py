"""Mock Google Calendar: the v3 REST shape under ``/worlds/{world}/calendar/v3``."""
