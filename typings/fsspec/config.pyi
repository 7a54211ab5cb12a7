conf: dict[str, dict[str, object]]
