"""AWS EC2 provider. Importing this package imports no SDK; ``providers.aws.adapter`` imports boto3."""
