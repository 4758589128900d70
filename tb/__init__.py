"""cocotb testbenches and verification IP."""
