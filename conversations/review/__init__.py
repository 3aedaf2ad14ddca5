"""What people say about the decisions: the review queue, feedback and labels (rule and service side by side), and
the dashboard with its daily rollups."""
