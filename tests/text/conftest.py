def pytest_configure(config):
    config.addinivalue_line("markers", "real_model: runs the offline SmolLM2-135M-Instruct model (select with -m real_model)")
