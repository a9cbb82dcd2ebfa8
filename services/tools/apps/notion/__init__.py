"""Mock Notion: the public API's v1 shape (Notion-Version 2022-06-28) under ``/worlds/{world}/notion/v1``."""
