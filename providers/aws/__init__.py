"""AWS EC2 through boto3. Import ``providers.aws.adapter`` only when AWS is used (it imports boto3)."""
