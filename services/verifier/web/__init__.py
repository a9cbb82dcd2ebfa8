"""Web verifier: build and serve a candidate app in a sandbox, drive it with Chromium."""
