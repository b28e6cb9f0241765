"""Across functions and modules: project trees and the families of ../shared/patterns."""
