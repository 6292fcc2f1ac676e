"""Application package for @@PROJECT@@."""
