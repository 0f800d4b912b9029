"""What can be bought and which offer a job gets: quotes, the planner, offer sources, a buyer's rules of thumb."""
