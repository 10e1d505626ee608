"""What rules are built on: the Rule class, name matching, syntax helpers, CUDA guards."""
