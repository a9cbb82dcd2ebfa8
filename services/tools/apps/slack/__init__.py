"""Mock Slack: the Web API's shape under ``/worlds/{world}/slack/api/<method>``."""
