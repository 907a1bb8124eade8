"""opolo_ros: Off-Policy Learning from Observations (OPOLO) as a ROS 2 package."""

__version__ = "0.1.0"
