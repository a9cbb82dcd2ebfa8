"""Guest images of the microvm runtime (see ``builder``)."""
