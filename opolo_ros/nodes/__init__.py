"""The ROS 2 nodes. Imported before any node module, so before their heavy imports (torch, MuJoCo):
a SIGINT that comes meanwhile to a node program started with SIGINT ignored is kept."""

from opolo_ros.signals import catch_ignored_sigint

catch_ignored_sigint()
